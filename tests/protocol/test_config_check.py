"""parse_config (woolf/protocol/config.py) and check_config (woolf/protocol/config_check.py).

Every key is tried at each boundary of its allowed range and just past it, with wrong types,
unknown keys and sections, and text that is not TOML. Each refusal is a ConfigError whose
message names the source, the key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest

from woolf.errors import ConfigError
from woolf.protocol.config import SECTIONS, LedgerConfig, check_config, parse_config
from woolf.protocol.config_check import GATES, MERGE_RULES, STALENESS_KINDS

pytestmark = pytest.mark.unit

SRC = "ledger/woolf.toml"


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: the same escapes
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def _doc(key: str, value, extra: dict | None = None) -> str:
    """TOML setting ``key`` (dotted: section.key, or a top-level key) to ``value``, plus ``extra`` keys."""
    items = {key: value, **(extra or {})}
    top = [f"{k} = {_toml(v)}" for k, v in items.items() if "." not in k]
    sections: dict[str, list[str]] = {}
    for k, v in items.items():
        if "." in k:
            section, name = k.rsplit(".", 1)
            sections.setdefault(section, []).append(f"{name} = {_toml(v)}")
    return "\n".join(top + [f"[{s}]\n" + "\n".join(lines) for s, lines in sections.items()]) + "\n"


def _get(cfg: LedgerConfig, key: str):
    obj = cfg
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


def _refused(text: str, *needles: str, source: str = SRC) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(text, source)
    err = info.value
    assert type(err) is ConfigError
    assert err.message.startswith(f"{source}: "), err.message
    for needle in needles:
        assert needle in err.message, (needle, err.message)
    return err


# key, accepted values (boundaries included), refused values (just past them), what is allowed,
# the name the message gives (the key unless several keys are checked together), other keys needed
RANGES = [
    ("merge.alpha_base", [1e-9, 0.5, 10, 10.0], [0, 0.0, -1.0, 10.000001, 11, math.inf, -math.inf, math.nan],
     "use a number in (0, 10]", None, {}),
    ("merge.max_staleness", [0, 1, 10**9], [-1, -(2**63)], "use an integer >= 0", None, {}),
    ("merge.rule", list(MERGE_RULES), ["", "Attenuated", "fedavg", "attenuated ", "nesterov\n"],
     "use one of attenuated, nesterov, delayed_nesterov, fedbuff", None, {}),
    ("merge.outer_lr", [1e-9, 10], [0, -0.1, 10.5, math.nan], "use a number in (0, 10]", None, {}),
    ("merge.momentum", [0, 0.0, 0.999999], [1, 1.0, -0.001, math.nan, math.inf], "use a number in [0, 1)", None, {}),
    ("merge.buffer", [1, 1024], [0, 1025, -1], "use an integer in [1, 1024]", None, {}),
    ("merge.staleness.kind", list(STALENESS_KINDS), ["linear", "", "Inverse"],
     "use one of inverse, polynomial, hinge, constant", None, {}),
    ("merge.staleness.a", [0, 0.0, 3.5], [-0.0001, -1], "use a number >= 0", None, {}),
    ("merge.staleness.b", [0, 100], [-1], "use an integer >= 0", None, {}),
    ("policy.gate", list(GATES), ["", "worst", "Best"], "use one of current, best", None, {}),
    ("policy.window", [1, 10_000], [0, 10_001, -5], "use an integer in [1, 10000]", None, {}),
    ("policy.direction", ["minimize", "maximize"], ["min", "Minimize", ""], "use 'minimize' or 'maximize'", None, {}),
    ("policy.metric", ["loss", "x"], [""], "name the metric the workload reports", None, {}),
    ("policy.max_drawdown", [0, 0.0, -1, -1.0, 5.5], [-0.5, -2, -1.0001, -math.inf],
     "use a number >= 0 (0: off), or -1 (twice the tolerated regression)", None, {}),
    ("workload.steps", [1, 10**6], [0, -1], "use an integer > 0", None, {}),
    ("workload.auto_seconds", [1e-9, 1], [0, 0.0, -1], "use seconds > 0", None, {}),
    ("workload.follow_every", [0, 5], [-1], "use an integer >= 0 (0: do not follow)", None, {}),
    ("workload.max_steps", [1], [0, -1], "use an integer > 0", None, {}),
    ("limits.max_delta_bytes", [1, 2**40], [0, -1], "use an integer > 0", None, {}),
    ("limits.max_header_bytes", [1], [0, -1], "use an integer > 0", None, {}),
    ("limits.max_tensors", [1], [0, -1], "use an integer > 0", None, {}),
    ("limits.max_delta_norm_ratio", [1.0, 1e9], [0, 0.0, -1.0], "use an integer > 0", None, {}),
    ("limits.min_delta_norm_ratio", [0, 0.0, 99.999], [-1e-9, 100, 100.0, 1000.0, math.nan],
     "use a number >= 0 below max_delta_norm_ratio", None, {}),
    ("delta.accept", [["dense"], ["dense", "topk"], ["topk", "dense"]], [[], ["sparse"], ["dense", 1], ["Dense"]],
     "use a non-empty list drawn from dense, topk", None, {}),
    ("delta.compress", ["dense", " dense ", "topk:0.02,bits:2", "topk:1,bits:8,chunk:32768", "topk:0.5,chunk:16"],
     ["", "sparse", "topk:0", "topk:1.5", "topk:nan", "topk:inf", "topk:x", "topk:0.1,bits:3", "topk:0.1,chunk:15",
      "topk:0.1,chunk:32769", "bits:2", "topk:0.1,topk:0.2", "topk:0.1,level:2", "topk:1e-400"],
     "use 'dense' or 'topk:0.02,bits:2[,chunk:256]'", None, {}),
    ("storage.snapshot_every", [1, 1_000_000], [0, 1_000_001], "use an integer in [1, 1000000]", None, {}),
    ("forge.kind", ["local", "github"], ["gitlab", "", "Local"], "use 'local' or 'github'", None, {"forge.repo": "o/n"}),
    ("forge.repo", ["o/n", "a.b-c_d/x.y", "A/B"], ["", "owner", "o/n/x", "o /n", "o/n\n", "/n", "o/"],
     "use 'owner/name' of the ledger's repository", None, {"forge.kind": "github"}),
    ("forge.delta_schemes", [["https"], ["http", "https"], ["http"]], [[], ["ftp"], ["https", "file"], ["HTTPS"]],
     "use a list drawn from 'https', 'http'", None, {}),
    ("forge.verdict_authors", [[], ["alice", "bot-1[bot]", "a" * 39, "A1"]],
     [["-alice"], ["a" * 40], ["al ice"], [1], ["x[bot]x"], [""], ["alice\n"]],
     "use a list of GitHub logins (the validators' accounts)", None, {}),
    ("forge.delta_timeout", [0.001, 1], [0, -1], "use seconds > 0", None, {}),
    ("signing.contributors", ["optional", "required"], ["always", ""], "use 'optional' or 'required'", None, {}),
    ("validators.quorum", [1, 64], [0, 65], "use an integer in [1, 64]", None, {}),
    ("validators.epsilon", [0, 999_999.9], [-1e-9, 1e6, math.nan],
     "epsilon in [0, 1e6), vote_timeout > 0, flag_rate in [0, 1]", "validators", {}),
    ("validators.vote_timeout", [0.1, 1e9], [0, -1],
     "epsilon in [0, 1e6), vote_timeout > 0, flag_rate in [0, 1]", "validators", {}),
    ("validators.flag_rate", [0, 1, 0.5], [-0.01, 1.01, math.nan],
     "epsilon in [0, 1e6), vote_timeout > 0, flag_rate in [0, 1]", "validators", {}),
    ("tasks.lease", [1, 1.0, 604_800], [0.999, 604_800.1, 0, math.nan], "use seconds in [1, 604800]", None, {}),
    ("scoring.sample_bytes", [64, 67_108_864], [63, 67_108_865], "use an integer in [64, 67108864]", None, {}),
    ("scoring.uniqueness", ["mark", "reject", "off"], ["on", ""], "use 'mark', 'reject' or 'off'", None, {}),
    ("scoring.copy_threshold", [1, 1e-9], [0, 1.0001, math.nan], "use a number in (0, 1]", None, {}),
    ("scoring.copy_window", [0, 1024], [-1, 1025], "use an integer in [0, 1024]", None, {}),
    ("scoring.norm_multiple", [0, 5.5], [-1, -1e-9], "use a multiple >= 0 and a window in [3, 1024]",
     "scoring.norm_multiple/norm_window", {}),
    ("scoring.norm_window", [3, 1024], [2, 1025], "use a multiple >= 0 and a window in [3, 1024]",
     "scoring.norm_multiple/norm_window", {}),
    ("scoring.norm_action", ["reject", "clip"], ["drop"], "use 'reject' or 'clip'", None, {}),
    ("scoring.min_effect", [0, 1.0], [-1e-12], "use a number >= 0", None, {}),
    ("queue.max_open_per_contributor", [1, 10**6], [0, -1], "use an integer >= 1", None, {}),
    ("benchmark.hidden_sha256", ["", "0" * 64, "0123456789abcdef" * 4],
     ["A" * 64, "a" * 63, "a" * 65, "g" * 64, " " + "a" * 63],
     "use a lower-case hex sha256 and its size in bytes (> 0)", "benchmark.hidden_sha256/hidden_size",
     {"benchmark.hidden_size": 10}),
    ("benchmark.hidden_size", [1, 2**40], [0, -1], "use a lower-case hex sha256 and its size in bytes (> 0)",
     "benchmark.hidden_sha256/hidden_size", {"benchmark.hidden_sha256": "a" * 64}),
    ("name", ["x", "a b", "ünïcode"], ["", "a\nb", "a\rb", "line\n"], "use a one-line name", None, {}),
]

ACCEPTED = [pytest.param(key, v, extra, id=f"{key}={v!r}"[:60])
            for key, ok, _, _, _, extra in RANGES for v in ok]
REFUSED = [pytest.param(key, v, allowed, named or key, extra, id=f"{key}={v!r}"[:60])
           for key, _, bad, allowed, named, extra in RANGES for v in bad]


@pytest.mark.parametrize("key, value, extra", ACCEPTED)
def test_each_value_in_range_is_accepted(key, value, extra):
    cfg = parse_config(_doc(key, value, extra))
    got = _get(cfg, key)
    if isinstance(value, float) or isinstance(got, float):
        assert got == float(value) and type(got) is float
    else:
        assert got == value


@pytest.mark.parametrize("key, value, allowed, named, extra", REFUSED)
def test_each_value_past_its_range_is_refused_naming_the_key_and_what_is_allowed(key, value, allowed, named, extra):
    err = _refused(_doc(key, value, extra), f"'{named}' = ", "is not allowed; ", allowed)
    assert err.hint is None


@pytest.mark.parametrize("key, allowed", [
    ("merge.staleness.a", "use a number >= 0"),
    ("workload.auto_seconds", "use seconds > 0"),
    ("forge.delta_timeout", "use seconds > 0"),
    ("validators.vote_timeout", "vote_timeout > 0"),
    ("scoring.norm_multiple", "use a multiple >= 0"),
    ("scoring.min_effect", "use a number >= 0"),
    ("policy.max_drawdown", "use a number >= 0 (0: off), or -1"),
])
def test_nan_is_refused_where_a_lower_bound_is_documented(key, allowed):
    _refused(_doc(key, math.nan), f"'{key}' = nan is not allowed; use a number")


@pytest.mark.parametrize("key", ["policy.min_improvement", "scoring.min_assigned"])
def test_nan_is_refused_for_every_key_naming_that_key(key):
    _refused(_doc(key, math.nan), f"'{key}' = nan is not allowed")


def test_nan_max_delta_norm_ratio_is_refused():
    _refused(_doc("limits.max_delta_norm_ratio", math.nan), "'limits.min_delta_norm_ratio' = ",
             "below max_delta_norm_ratio")


def test_the_boundaries_of_two_keys_checked_together():
    assert parse_config(_doc("limits.min_delta_norm_ratio", 0.5, {"limits.max_delta_norm_ratio": 0.5000001}))
    _refused(_doc("limits.min_delta_norm_ratio", 0.5, {"limits.max_delta_norm_ratio": 0.5}),
             "'limits.min_delta_norm_ratio' = 0.5 is not allowed")


def test_a_compress_kind_outside_accept_is_refused():
    _refused(_doc("delta.compress", "topk:0.1", {"delta.accept": ["dense"]}),
             "'delta.compress' = 'topk:0.1' is not allowed; use a kind in delta.accept (dense)")
    _refused(_doc("delta.accept", ["topk"]),
             "'delta.compress' = 'dense' is not allowed; use a kind in delta.accept (topk)")
    assert parse_config(_doc("delta.accept", ["topk"], {"delta.compress": "topk:0.1"})).delta.accept == ["topk"]


def test_forge_repo_is_only_checked_for_github():
    assert parse_config(_doc("forge.repo", "not a repo")).forge.repo == "not a repo"


def test_an_empty_hidden_sha256_needs_no_size():
    assert parse_config(_doc("benchmark.hidden_size", 0)).benchmark.hidden_size == 0


def test_a_message_quotes_a_hostile_value_on_one_line():
    err = _refused(_doc("merge.rule", "x\n\nWoolf-Version: 1\x1b[2J"), "'merge.rule' = ")
    assert "\n" not in err.message and "\x1b" not in err.message


def test_the_first_key_not_allowed_is_the_one_named():
    text = _doc("merge.alpha_base", 0, {"merge.buffer": 0, "policy.window": 0})
    _refused(text, "'merge.alpha_base'")


def test_the_source_names_the_file_in_every_error():
    _refused(_doc("merge.buffer", 0), "'merge.buffer'", source="other/woolf.toml")
    _refused("[", "not valid TOML", source="x.toml")
    _refused("foo = 1", "unknown section", source="y.toml")


# -- the defaults ----------------------------------------------------------------------------------

def test_an_empty_file_is_the_default_config():
    assert parse_config("") == LedgerConfig()


def test_the_default_config_passes_check_config():
    check_config(LedgerConfig(), SRC)


def test_every_key_written_back_as_its_default_parses_to_the_default():
    defaults = LedgerConfig()
    lines = [f"name = {_toml(defaults.name)}"]

    def table(where: str, obj):
        plain = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)
                 if not dataclasses.is_dataclass(getattr(obj, f.name)) and f.name != "params"}
        lines.append(f"[{where}]")
        lines.extend(f"{k} = {_toml(v)}" for k, v in plain.items())
        for f in dataclasses.fields(obj):
            if dataclasses.is_dataclass(getattr(obj, f.name)):
                table(f"{where}.{f.name}", getattr(obj, f.name))

    for section in SECTIONS:
        table(section, getattr(defaults, section))
    assert parse_config("\n".join(lines) + "\n") == defaults


# -- check_config on a config built in code ----------------------------------------------------------

@pytest.mark.parametrize("patch, named", [
    (lambda c: setattr(c, "name", ""), "name"),
    (lambda c: setattr(c.merge, "buffer", 2000), "merge.buffer"),
    (lambda c: setattr(c.merge.staleness, "kind", None), "merge.staleness.kind"),
    (lambda c: setattr(c.delta, "accept", [["dense"]]), "delta.accept"),
    (lambda c: setattr(c.forge, "verdict_authors", [None]), "forge.verdict_authors"),
])
def test_check_config_names_the_key_of_a_config_built_in_code(patch, named):
    cfg = LedgerConfig()
    patch(cfg)
    with pytest.raises(ConfigError, match=rf"^src\.toml: '{re.escape(named)}' = .* is not allowed; "):
        check_config(cfg, "src.toml")


# -- types -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("key, value, expected", [
    ("merge.buffer", 1.5, "int"),
    ("merge.buffer", 4.0, "int"),
    ("merge.buffer", "4", "int"),
    ("merge.buffer", True, "int"),
    ("merge.buffer", [4], "int"),
    ("merge.alpha_base", True, "float"),
    ("merge.alpha_base", "1.0", "float"),
    ("merge.alpha_base", [1.0], "float"),
    ("merge.rule", 1, "str"),
    ("merge.rule", ["attenuated"], "str"),
    ("merge.rule", True, "str"),
    ("workload.error_feedback", 1, "bool"),
    ("workload.error_feedback", "true", "bool"),
    ("queue.fair", 0, "bool"),
    ("delta.accept", "dense", "list"),
    ("forge.delta_schemes", "https", "list"),
    ("workload.params", 1, "dict"),
    ("workload.params", [1], "dict"),
])
def test_a_value_of_the_wrong_type_is_refused_naming_the_key_and_the_type(key, value, expected):
    _refused(_doc(key, value), f"'{key}' must be a {expected}, got {value!r}")


def test_the_name_must_be_a_string():
    _refused("name = 1\n", "'name' must be a string, got 1")
    _refused("name = [\"a\"]\n", "'name' must be a string, got ['a']")
    _refused("[name]\nx = 1\n", "'name' must be a string, got {'x': 1}")


@pytest.mark.parametrize("text, fixed", [
    ("[merge]\nalpha_base = 1\n", ("merge.alpha_base", 1.0)),
    ("[tasks]\nlease = 600\n", ("tasks.lease", 600.0)),
    ("[merge.staleness]\na = 2\n", ("merge.staleness.a", 2.0)),
])
def test_an_integer_for_a_float_key_is_read_as_a_float(text, fixed):
    key, value = fixed
    got = _get(parse_config(text), key)
    assert got == value and type(got) is float


def test_params_and_lists_are_kept_as_written():
    cfg = parse_config('[workload.params]\nd_model = 32\nname = "x"\n[delta]\naccept = ["dense"]\n')
    assert cfg.workload.params == {"d_model": 32, "name": "x"}
    assert cfg.delta.accept == ["dense"]


@pytest.mark.parametrize("text, where", [
    ("merge = 1\n", "[merge]"),
    ('merge = "x"\n', "[merge]"),
    ("merge = [1]\n", "[merge]"),
    ("[[merge]]\nrule = 'nesterov'\n", "[merge]"),
    ("[merge]\nstaleness = 1\n", "[merge.staleness]"),
    ("[merge]\nstaleness = [{kind = 'inverse'}]\n", "[merge.staleness]"),
])
def test_a_section_that_is_not_a_table_is_refused(text, where):
    _refused(text, f"{where} must be a table")


# -- unknown keys and sections -----------------------------------------------------------------------

@pytest.mark.parametrize("text, key", [
    ("foo = 1\n", "foo"),
    ("[foo]\nx = 1\n", "foo"),
    ("[Merge]\nrule = 'nesterov'\n", "Merge"),
    ("[merge.rule]\n", "merge.rule"),
    ("[woolf]\nname = 'x'\n", "woolf"),
])
def test_an_unknown_section_or_top_level_key_is_refused_listing_the_allowed(text, key):
    if "." in key:  # merge.rule is a key, not a table: the type check refuses it
        _refused(text, "'merge.rule' must be a str, got {}")
        return
    err = _refused(text, f"unknown section or key '{key}'")
    assert err.hint == "allowed: name, " + ", ".join(f"[{s}]" for s in SECTIONS)


@pytest.mark.parametrize("text, key, allowed", [
    ("[merge]\nfoo = 1\n", "merge.foo", "rule, alpha_base, max_staleness, outer_lr, momentum, buffer, staleness"),
    ("[merge]\nRule = 'nesterov'\n", "merge.Rule", "rule, alpha_base"),
    ("[merge.staleness]\nc = 1\n", "merge.staleness.c", "kind, a, b"),
    ("[limits]\nmax_bytes = 1\n", "limits.max_bytes", "max_delta_bytes, max_header_bytes, max_tensors"),
    ('[policy]\n"metric " = "x"\n', "policy.metric ", "metric, direction"),
])
def test_an_unknown_key_is_refused_listing_the_keys_of_its_section(text, key, allowed):
    err = _refused(text, f"unknown key '{key}'")
    assert err.hint.startswith(f"allowed keys in [{key.rsplit('.', 1)[0]}]: ")
    assert allowed in err.hint


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_section_refuses_an_unknown_key(section):
    _refused(f"[{section}]\nno_such_key = 1\n", f"unknown key '{section}.no_such_key'")


# -- not TOML --------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "[merge",
    "a = ",
    "= 1",
    "x = 1\nx = 2\n",
    "name = 'a'\nname = 'b'\n",
    "[merge]\n[merge]\n",
    "[merge]\nrule = 'a'\nrule = 'b'\n",
    "merge.rule = 'a'\n[merge]\nrule = 'b'\n",
    "name = 'a\x00'\n",
    "name = \"\\ud800\"\n",
    "name = 'unterminated\n",
    "{}",
    '{"name": "json"}',
    "\ufeffname = 'x'\n",
    "x = 1979-05-27T25:00:00Z\n",
])
def test_text_that_is_not_toml_is_refused(text):
    _refused(text, "not valid TOML: ")


def test_a_value_toml_has_but_the_config_does_not_is_refused_by_type():
    _refused("[merge]\nalpha_base = 1979-05-27\n", "'merge.alpha_base' must be a float, got datetime.date(1979, 5, 27)")
