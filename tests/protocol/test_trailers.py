"""The trailer readers of woolf/protocol/trailers.py: parse_message, int_field, float_field, json_field.

Commit messages are attacker-written. parse_message takes only the Woolf-* lines of the last
paragraph; the field readers never raise and read anything over their caps (digits, length,
size, depth) or anything that does not parse as None, like a missing trailer. The registry of
names is tested in test_trailer_names.py.
"""

from __future__ import annotations

import math

import pytest

from woolf.protocol.trailers import (
    INT_MAX_DIGITS,
    JSON_MAX_CHARS,
    JSON_MAX_DEPTH,
    float_field,
    format_message,
    int_field,
    json_field,
    parse_message,
)

pytestmark = pytest.mark.unit

KEY = "Woolf-X"


def _f(value: str) -> dict:
    return {KEY: value}


# -- parse_message ---------------------------------------------------------------------------------

def test_subject_and_trailers_of_a_plain_message():
    msg = "woolf: version 3\n\nWoolf-Version: 3\nWoolf-Metrics: {\"loss\":2.1}\n"
    assert parse_message(msg) == ("woolf: version 3", {"Woolf-Version": "3", "Woolf-Metrics": '{"loss":2.1}'})


def test_only_the_last_paragraph_is_read():
    msg = ("subject\n\nWoolf-Version: 999\nWoolf-Verdict: accept\n\nbody text\nWoolf-Staleness: 7\n\n"
           "Woolf-Version: 1\n")
    assert parse_message(msg) == ("subject", {"Woolf-Version": "1"})


def test_trailers_in_the_body_are_not_read_when_the_last_paragraph_has_none():
    assert parse_message("subject\n\nWoolf-Version: 5\n\nplain last paragraph\n") == ("subject", {})


@pytest.mark.parametrize("msg", [
    "Woolf-Version: 1",
    "Woolf-Version: 1\n",
    "Woolf-Version: 1\nWoolf-Staleness: 2\n",  # one paragraph: the subject's
    "\n\n\nWoolf-Version: 1\n\n\n",
])
def test_a_message_of_one_paragraph_has_no_trailers(msg):
    subject, fields = parse_message(msg)
    assert subject == "Woolf-Version: 1" and fields == {}


@pytest.mark.parametrize("msg", ["", "\n", "\n\n\n\n"])
def test_an_empty_message_has_an_empty_subject_and_no_trailers(msg):
    assert parse_message(msg) == ("", {})


def test_leading_and_trailing_newlines_do_not_move_the_last_paragraph():
    assert parse_message("\n\nsubject\n\nWoolf-Version: 2\n\n\n\n") == ("subject", {"Woolf-Version": "2"})


def test_more_blank_lines_between_paragraphs_still_split_them():
    assert parse_message("s\n\nWoolf-A: 1\n\n\n\nWoolf-B: 2\n")[1] == {"Woolf-B": "2"}


def test_other_lines_of_the_last_paragraph_are_skipped():
    msg = "s\n\nSigned-off-by: someone\nWoolf-Version: 4\nrandom words\nX-Woolf-Version: 5\n"
    assert parse_message(msg)[1] == {"Woolf-Version": "4"}


@pytest.mark.parametrize("line", [
    "Woolf-Version:1",          # no space after the colon
    "Woolf-Version : 1",        # space before it
    "Woolf-Version:\t1",
    " Woolf-Version: 1",        # indented
    "\tWoolf-Version: 1",
    "woolf-version: 1",         # case matters
    "WOOLF-VERSION: 1",
    "Woolf-: 1",                # no name after the prefix
    "Woolf-Ver_sion: 1",
    "Woolf-Ver sion: 1",
    "Woolf-Ver.sion: 1",
    "Woolf-Versi\u00f6n: 1",    # a non-ASCII letter
    "Woolf-Ver\u0661: 1",       # a non-ASCII digit
    "Woolf-Version",
    "Woolf-Version:",
    "Woolf\u2010Version: 1",    # a Unicode hyphen
])
def test_lines_that_are_not_woolf_trailers_are_skipped(line):
    assert parse_message(f"s\n\n{line}\nWoolf-Ok: 1\n")[1] == {"Woolf-Ok": "1"}


def test_a_value_keeps_everything_after_the_first_colon_and_space():
    fields = parse_message("s\n\nWoolf-A: b: c\nWoolf-B:  padded \nWoolf-C: \nWoolf-D: x\u2028y\n")[1]
    assert fields == {"Woolf-A": "b: c", "Woolf-B": " padded ", "Woolf-C": "", "Woolf-D": "x\u2028y"}


def test_a_repeated_trailer_reads_as_its_last_line():
    assert parse_message("s\n\nWoolf-Version: 1\nWoolf-Version: 2\n")[1] == {"Woolf-Version": "2"}


def test_carriage_returns_stay_in_the_value_and_make_it_unreadable_as_a_number():
    subject, fields = parse_message("s\r\n\nWoolf-Version: 3\r\nWoolf-Alpha: 0.5\r\n")
    assert subject == "s\r"
    assert fields == {"Woolf-Version": "3\r", "Woolf-Alpha": "0.5\r"}
    assert int_field(fields, "Woolf-Version") is None


def test_crlf_paragraphs_are_not_split():
    assert parse_message("s\r\n\r\nWoolf-Version: 3\r\n") == ("s\r", {})


def test_a_huge_message_is_read_in_linear_time():
    body = "x" * 1_000_000 + "\n" + "\n".join(f"Woolf-K{i}: {i}" for i in range(20_000))
    subject, fields = parse_message("s\n\n" + "a\n\n" * 50_000 + body)
    assert len(fields) == 20_000 and fields["Woolf-K19999"] == "19999"


def test_what_format_message_writes_reads_back():
    msg = format_message("woolf:  version\t7", {"Woolf-Version": 7, "Woolf-Alpha": 0.25,
                                               "Woolf-Metrics": {"loss": 2.5, "acc": [1, 2]},
                                               "Woolf-Staleness": None},
                         body="a body\n\nWoolf-Version: 999\n")
    subject, fields = parse_message(msg)
    assert subject == "woolf: version 7"
    assert int_field(fields, "Woolf-Version") == 7
    assert float_field(fields, "Woolf-Alpha") == 0.25
    assert json_field(fields, "Woolf-Metrics") == {"loss": 2.5, "acc": [1, 2]}
    assert "Woolf-Staleness" not in fields


# -- int_field -------------------------------------------------------------------------------------

def test_a_missing_int_field_is_none():
    assert int_field({}, KEY) is None


@pytest.mark.parametrize("raw, value", [
    ("0", 0), ("-0", 0), ("7", 7), ("-7", -7), ("007", 7),
    ("9" * INT_MAX_DIGITS, int("9" * INT_MAX_DIGITS)),
    ("-" + "9" * INT_MAX_DIGITS, -int("9" * INT_MAX_DIGITS)),
])
def test_ascii_integers_up_to_the_digit_cap_are_read(raw, value):
    assert int_field(_f(raw), KEY) == value


@pytest.mark.parametrize("raw", [
    "1" * (INT_MAX_DIGITS + 1),
    "-" + "1" * (INT_MAX_DIGITS + 1),
    "9" * 4301,             # past Python's own int() limit
    "9" * 1_000_000,
])
def test_more_digits_than_the_cap_read_as_none(raw):
    assert INT_MAX_DIGITS == 30
    assert int_field(_f(raw), KEY) is None


@pytest.mark.parametrize("raw", [
    "\u0661\u0662",         # Arabic-Indic digits, which int() accepts
    "1\u0662",
    "\uff11\uff12",         # fullwidth digits
    "\u00b2",               # superscript two: str.isdigit() is true
    "\u0967",               # Devanagari one
    "-\u0661",
])
def test_non_ascii_digits_read_as_none(raw):
    assert int_field(_f(raw), KEY) is None


@pytest.mark.parametrize("raw", [
    "", "-", "--1", "+1", " 1", "1 ", "1\r", "1\n", "\t1", "1_000", "1.0", "1e3", "0x10", "0b1", "1-", "- 1",
    "one", "NaN", "inf", "\x00", "1\x00",
])
def test_anything_but_an_optional_minus_and_digits_reads_as_none(raw):
    assert int_field(_f(raw), KEY) is None


# -- float_field -----------------------------------------------------------------------------------

def test_a_missing_float_field_is_none():
    assert float_field({}, KEY) is None


@pytest.mark.parametrize("raw, value", [
    ("0.25", 0.25), ("-0.0", -0.0), ("1", 1.0), ("1e-3", 1e-3), ("-1.5E+2", -150.0),
    (repr(0.1 + 0.2), 0.1 + 0.2), ("1" * 64, float("1" * 64)), ("1e308", 1e308),
])
def test_numbers_up_to_64_characters_are_read(raw, value):
    got = float_field(_f(raw), KEY)
    assert got == value and type(got) is float


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-inf", "Infinity", "1e999"])
def test_non_finite_values_stay_readable(raw):
    """A validator may record a non-finite loss: the caller decides what it means."""
    got = float_field(_f(raw), KEY)
    assert math.isnan(got) or math.isinf(got)


@pytest.mark.parametrize("raw", ["1" * 65, "0." + "1" * 63, " " * 60 + "1.5" + " " * 10, "9" * 1_000_000])
def test_more_than_64_characters_read_as_none(raw):
    assert float_field(_f(raw), KEY) is None


@pytest.mark.parametrize("raw", ["", "x", "1.5.5", "1,5", "0x10", "1e", "--1", "1 2", "\x00", "nan(1)", "1j"])
def test_text_that_is_not_a_float_reads_as_none(raw):
    assert float_field(_f(raw), KEY) is None


# -- json_field ------------------------------------------------------------------------------------

def test_a_missing_json_field_is_none():
    assert json_field({}, KEY) is None


@pytest.mark.parametrize("raw, doc", [
    ('{"loss":2.1}', {"loss": 2.1}), ("[1,2]", [1, 2]), ('"text"', "text"), ("3", 3), ("[]", []),
    ('{"a":1,"a":2}', {"a": 2}),
])
def test_json_is_read(raw, doc):
    assert json_field(_f(raw), KEY) == doc


def test_nan_and_infinity_stay_readable_in_json():
    doc = json_field(_f('{"loss": NaN, "hi": Infinity, "lo": -Infinity}'), KEY)
    assert math.isnan(doc["loss"]) and doc["hi"] == math.inf and doc["lo"] == -math.inf


def test_json_of_exactly_the_size_cap_is_read_and_one_more_character_is_not():
    at = '"' + "x" * (JSON_MAX_CHARS - 2) + '"'
    assert len(at) == JSON_MAX_CHARS
    assert json_field(_f(at), KEY) == "x" * (JSON_MAX_CHARS - 2)
    assert json_field(_f('"' + "x" * (JSON_MAX_CHARS - 1) + '"'), KEY) is None
    assert json_field(_f(" " * (JSON_MAX_CHARS + 1) + "1"), KEY) is None


def test_the_size_cap_counts_characters():
    assert json_field(_f('"' + "\u6f22" * (JSON_MAX_CHARS - 2) + '"'), KEY) is not None


@pytest.mark.parametrize("opener, closer", [("[", "]"), ('{"a":', "}")])
def test_json_nested_to_the_depth_cap_is_read_and_one_deeper_is_not(opener, closer):
    def nested(n):
        return opener * n + "1" + closer * n

    assert JSON_MAX_DEPTH == 32
    assert json_field(_f(nested(JSON_MAX_DEPTH)), KEY) is not None
    assert json_field(_f(nested(JSON_MAX_DEPTH + 1)), KEY) is None


@pytest.mark.parametrize("raw", [
    "[" * 500_000 + "]" * 500_000,                  # exactly the size cap, far past the recursion limit
    '{"a":' * 150_000 + "1" + "}" * 150_000,
    "[" * (JSON_MAX_CHARS // 2),                    # never closed
])
def test_json_nested_past_the_recursion_limit_reads_as_none(raw):
    assert len(raw) <= JSON_MAX_CHARS
    assert json_field(_f(raw), KEY) is None


@pytest.mark.parametrize("raw", [
    "", " ", "{", "{'a': 1}", "{} {}", "[1,]", "nan", "undefined", '"\x01"', "1" * 5000, "\ufeff{}",
])
def test_text_that_is_not_json_reads_as_none(raw):
    assert json_field(_f(raw), KEY) is None


def test_trailer_readers_never_raise_on_hostile_values():
    f = {"big": "9" * 5000, "neg": "-" + "1" * 31, "ok": "-12", "deep": "[" * 100_000 + "]" * 100_000,
         "nest": '{"a":' * 40 + "1" + "}" * 40, "jbig": "[" + "9" * 5000 + "]", "fbig": "1" * 65,
         "nan": '{"loss":NaN}', "metrics": '{"loss":2.5}'}
    assert int_field(f, "big") is None and int_field(f, "neg") is None and int_field(f, "ok") == -12
    assert json_field(f, "deep") is None and json_field(f, "nest") is None and json_field(f, "jbig") is None
    assert float_field(f, "fbig") is None and json_field(f, "metrics") == {"loss": 2.5}
    assert json_field(f, "nan")["loss"] != json_field(f, "nan")["loss"]  # NaN: a validator may record one


def test_trailers_roundtrip():
    msg = format_message("woolf: version 3", {"Woolf-Version": 3, "Woolf-Metrics": {"loss": 2.5},
                                              "Woolf-Reverts": None}, body="free text\nmore")
    subject, fields = parse_message(msg)
    assert subject == "woolf: version 3"
    assert fields == {"Woolf-Version": "3", "Woolf-Metrics": '{"loss":2.5}'}
    with pytest.raises(ValueError):
        format_message("x", {"Woolf-Reason": "two\nlines"})
