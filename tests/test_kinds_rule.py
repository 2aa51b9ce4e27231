"""The kinds rule, as a test: no module outside woolf/storage/kinds/ compares a delta kind's name.

Usage:
    pytest tests/test_kinds_rule.py
    python tests/test_kinds_rule.py          # prints every comparison that breaks the rule, file:line

What `dense`, `topk` and `lora` mean lives in one package (woolf/storage/kinds/: one module per kind,
a registry by name); everyone else asks the kind (``kind_for(declared).open(...)``,
``kinds.LORA.accepted_by(accept)``). A break, in any module under woolf/ but that package, is:
- a comparison (==, !=, in, not in) with a string constant naming a registered kind, alone or in a
  tuple, list, set or conditional of constants (``kind == "lora"``, ``k in ("dense", "lora")``);
- a comparison of the kind read off a delta's declaration: ``X["kind"]``, ``X.get("kind")`` or
  ``X.kind`` where X is a delta (its source names ``delta`` or ``declared``: ``declared.get("kind")``,
  ``adm.meta["delta"]["kind"]``), whatever it is compared with;
- a ``match`` case on a kind's name, or a dict literal whose keys are all kinds' names (a dispatch
  table; a record with a field that happens to be called ``lora`` is not one).
Other kinds are not delta kinds and pass: a merge rule's ``rule.kind == "attenuated"``, a recipe's
``data["kind"] == "private"``. Names as data pass too: ``{"kind": "dense"}``, ``KINDS = (...)``.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "woolf"
KINDS_PACKAGE = ("storage", "kinds")  # relative to woolf/: the one place a kind's name may be compared
COMPARISONS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)
DELTA = re.compile(r"delta|declared", re.IGNORECASE)  # the source of something that is a delta's declaration


def registered() -> tuple[str, ...]:
    from woolf.storage.kinds import names

    return names()


def _names_a_kind(node: ast.AST, names) -> bool:
    """A string constant naming a kind, or a tuple/list/set/conditional of constants holding one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in names
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_kind(e, names) for e in node.elts)
    if isinstance(node, ast.IfExp):
        return _names_a_kind(node.body, names) or _names_a_kind(node.orelse, names)
    if isinstance(node, ast.BoolOp):
        return any(_names_a_kind(v, names) for v in node.values)
    return False


def _is_kind_key(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == "kind"


def _reads_a_delta_kind(node: ast.AST) -> bool:
    """``X["kind"]``, ``X.get("kind", ...)`` or ``X.kind`` with X a delta's declaration."""
    if isinstance(node, ast.Subscript) and _is_kind_key(node.slice):
        base = node.value
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
          and node.args and _is_kind_key(node.args[0])):
        base = node.func.value
    elif isinstance(node, ast.Attribute) and node.attr == "kind":
        base = node.value
    else:
        return False
    return bool(DELTA.search(ast.unparse(base)))


def _break(node: ast.AST, names) -> str | None:
    """What ``node`` does that only the kinds package may, or None."""
    if isinstance(node, ast.Compare) and any(isinstance(op, COMPARISONS) for op in node.ops):
        sides = [node.left, *node.comparators]
        if any(_names_a_kind(s, names) or _reads_a_delta_kind(s) for s in sides):
            return f"compares a delta kind: {ast.unparse(node)[:100]}"
    if isinstance(node, ast.match_case) and any(
            isinstance(p, ast.MatchValue) and _names_a_kind(p.value, names) for p in ast.walk(node.pattern)):
        return f"matches a delta kind's name: case {ast.unparse(node.pattern)[:80]}"
    if (isinstance(node, ast.Dict) and len(node.keys) > 1
            and all(k is not None and _names_a_kind(k, names) for k in node.keys)):
        return f"a table keyed by delta kinds' names: {ast.unparse(node)[:80]}"
    return None


def breaks(package: Path = PACKAGE, names=None) -> list[str]:
    """Every break of the rule under ``package`` as "path:line: what", in file and line order."""
    names = registered() if names is None else tuple(names)
    exempt = package.joinpath(*KINDS_PACKAGE)
    out = []
    for path in sorted(package.rglob("*.py")):
        if exempt in path.parents:
            continue
        rel = path.relative_to(package.parent)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            what = _break(node, names)
            if what is not None:
                out.append((str(rel), getattr(node, "lineno", None) or node.pattern.lineno, what))
    return [f"{p}:{line}: {what}" for p, line, what in sorted(out)]


def test_no_module_outside_the_kinds_package_compares_a_kind_name():
    assert breaks() == []


def test_the_rule_finds_each_kind_of_break_and_nothing_else(tmp_path):
    """The checker itself, on a copy of the package with deliberate breaks beside comparisons of kinds
    that are not delta kinds."""
    copy = tmp_path / "woolf"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    verdict = copy / "validator" / "verdict.py"
    start = len(verdict.read_text().splitlines())
    with verdict.open("a") as f:
        f.write("\n\ndef _f(declared, adm, kind, rule, recipe, x):\n"
                "    a = kind == 'lora'\n"                                   # +4: a name
                "    b = declared.get('kind') != x\n"                         # +5: read off a declaration
                "    c = adm.meta['delta']['kind'] in x\n"                    # +6
                "    d = ('dense' if x else 'topk') not in x\n"               # +7: in a conditional
                "    e = rule.kind == 'attenuated' or recipe['data']['kind'] == 'private'\n"   # +8: not a delta's
                "    g = {'kind': 'dense'}\n"                                 # +9: a name as data
                "    h = {'topk': 1, 'lora': 2}[kind] + {'lora': 3}['lora']\n"   # +10: a table; a record
                "    match kind:\n"
                "        case 'dense':\n"                                     # +12
                "            pass\n"
                "    return a, b, c, d, e, g, h\n")
    with (copy / "storage" / "kinds" / "dense.py").open("a") as f:
        f.write("\n\ndef _g(kind):\n    return kind == 'dense'\n")  # the kinds package: allowed
    found = breaks(copy, ("dense", "topk", "lora"))
    rel = "woolf/validator/verdict.py"
    assert [b.split(": ")[0] for b in found] == [f"{rel}:{start + n}" for n in (4, 5, 6, 7, 10, 12)], found
    assert breaks(PACKAGE) == []  # the real tree is clean


if __name__ == "__main__":
    for line in breaks():
        print(line)
