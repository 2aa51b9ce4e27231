"""loads_untrusted and depth (woolf/protocol/safejson.py): JSON read from attacker-written bytes.

Every refusal is a ValueError whose message names the problem (size, encoding, syntax, nesting,
a non-JSON constant); never a RecursionError, UnicodeDecodeError or OverflowError.
"""

from __future__ import annotations

import json
import math

import pytest

from woolf.protocol.safejson import depth, loads_untrusted

pytestmark = pytest.mark.unit

BIG = 1 << 24


def _nested(levels: int, open_: bytes = b"[", close: bytes = b"]") -> bytes:
    return open_ * levels + close * levels


def _nested_objects(levels: int) -> bytes:
    return b'{"a":' * levels + b"1" + b"}" * levels


# -- accepting -------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, doc", [
    (b"{}", {}),
    (b"[]", []),
    (b"0", 0),
    (b"-12.5e3", -12500.0),
    (b'"text"', "text"),
    (b"null", None),
    (b"true", True),
    (b' \n\t{"a": [1, 2, {"b": null}]}  \n', {"a": [1, 2, {"b": None}]}),
    ('{"name": "caf\u00e9 \u6f22 \U0001f600"}'.encode(), {"name": "caf\u00e9 \u6f22 \U0001f600"}),
    (b'"\\ud83d\\ude00"', "\U0001f600"),  # a surrogate pair written as escapes is one character
])
def test_valid_json_is_returned_parsed(raw, doc):
    assert loads_untrusted(raw, max_bytes=1024, max_depth=4) == doc


def test_exactly_max_bytes_is_accepted():
    raw = b'"' + b"x" * 98 + b'"'
    assert len(raw) == 100
    assert loads_untrusted(raw, max_bytes=100, max_depth=1) == "x" * 98


@pytest.mark.parametrize("limit", [1, 4, 16])
def test_exactly_max_depth_is_accepted(limit):
    assert depth(loads_untrusted(_nested(limit), BIG, limit), 100) == limit
    assert loads_untrusted(_nested_objects(limit), BIG, limit) is not None


def test_scalars_have_depth_zero_and_are_accepted_at_any_depth_limit():
    assert loads_untrusted(b"7", 16, max_depth=0) == 7
    assert depth(7, 0) == 0
    assert depth("x", 0) == 0


# -- size ------------------------------------------------------------------------------------------

def test_one_byte_over_max_bytes_is_refused_with_both_numbers():
    raw = b'"' + b"x" * 99 + b'"'
    with pytest.raises(ValueError, match=r"^101 bytes, over the limit of 100$"):
        loads_untrusted(raw, max_bytes=100, max_depth=4)


def test_size_is_checked_before_anything_is_parsed():
    """Over the limit is refused by size even when the bytes would fail to decode or parse."""
    with pytest.raises(ValueError, match="over the limit of 8"):
        loads_untrusted(b"\xff" * 9, max_bytes=8, max_depth=4)
    with pytest.raises(ValueError, match="over the limit of 8"):
        loads_untrusted(_nested(100_000), max_bytes=8, max_depth=4)


# -- encoding --------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw", [
    b'"\xff"',              # never valid in UTF-8
    b'"\xc3"',              # truncated two-byte sequence
    b'"\xc0\xaf"',          # overlong encoding of '/'
    b'"\xed\xa0\x80"',      # an encoded surrogate (CESU-8), not UTF-8
    b'"\xf4\x90\x80\x80"',  # above U+10FFFF
    '"é"'.encode("latin-1"),
    '{"a": 1}'.encode("utf-16"),
])
def test_bytes_that_are_not_utf8_are_refused(raw):
    with pytest.raises(ValueError, match=r"^not valid JSON \(not UTF-8\)$"):
        loads_untrusted(raw, BIG, 4)


def test_a_utf8_byte_order_mark_is_refused_as_json_syntax():
    with pytest.raises(ValueError, match=r"^not valid JSON \(.*BOM.* at byte 0\)$"):
        loads_untrusted(b"\xef\xbb\xbf{}", BIG, 4)


def test_a_lone_surrogate_escape_is_refused():
    with pytest.raises(ValueError, match="surrogate|UTF-8"):
        loads_untrusted(b'"\\ud800"', BIG, 4)


# -- syntax ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, pos", [
    (b"", 0),
    (b"   ", 3),
    (b"{", 1),
    (b'{"a": 1,}', 8),
    (b"[1, 2", 5),
    (b"{'a': 1}", 1),
    (b"{} {}", 3),          # extra data after the document
    (b'"\x01"', 1),         # a raw control character inside a string
    (b"01", 1),
    (b"[1] garbage", 4),
])
def test_syntax_errors_are_refused_with_the_byte_offset(raw, pos):
    with pytest.raises(ValueError, match=rf"^not valid JSON \(.* at byte {pos}\)$"):
        loads_untrusted(raw, BIG, 4)


def test_syntax_errors_are_plain_value_errors_not_json_decode_errors():
    with pytest.raises(ValueError) as info:
        loads_untrusted(b"{", BIG, 4)
    assert type(info.value) is ValueError
    assert info.value.__cause__ is None and info.value.__suppress_context__


# -- NaN and Infinity --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("template", ["{}", "[{}]", '{{"shape": [1, {}]}}'])
def test_nan_and_infinity_constants_are_refused_by_name(name, template):
    with pytest.raises(ValueError, match=rf"^{name} is not JSON$"):
        loads_untrusted(template.format(name).encode(), BIG, 4)


@pytest.mark.parametrize("raw", [b"nan", b"inf", b"-inf", b"Inf", b"+1", b".5", b"1."])
def test_other_spellings_of_non_finite_numbers_are_syntax_errors(raw):
    with pytest.raises(ValueError, match=r"^not valid JSON \("):
        loads_untrusted(raw, BIG, 4)


@pytest.mark.parametrize("raw", [b"1e400", b"[-1e400]", b'{"shape": [1e999]}'])
def test_numbers_that_overflow_to_infinity_are_refused(raw):
    with pytest.raises(ValueError, match="Infinity|finite|overflow"):
        loads_untrusted(raw, BIG, 4)


def test_large_finite_numbers_are_kept_exactly():
    assert loads_untrusted(b"1.7976931348623157e308", BIG, 4) == 1.7976931348623157e308
    assert not math.isinf(loads_untrusted(b"-1.7976931348623157e308", BIG, 4))
    assert loads_untrusted(b"1" * 4300, BIG, 4) == int("1" * 4300)


def test_an_integer_past_pythons_digit_limit_is_a_value_error_naming_the_digits():
    with pytest.raises(ValueError, match=r"4300 digits"):
        loads_untrusted(b"1" * 4301, BIG, 4)


# -- nesting ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("limit", [0, 1, 4, 16])
def test_one_level_past_max_depth_is_refused(limit):
    with pytest.raises(ValueError, match=rf"^nested deeper than {limit} levels$"):
        loads_untrusted(_nested(limit + 1), BIG, limit)
    with pytest.raises(ValueError, match=rf"^nested deeper than {limit} levels$"):
        loads_untrusted(_nested_objects(limit + 1), BIG, limit)


@pytest.mark.parametrize("levels", [5_000, 200_000])
@pytest.mark.parametrize("brackets", [(b"[", b"]"), (b'{"a":', b"}")])
def test_nesting_past_the_recursion_limit_is_a_refusal_not_a_recursion_error(levels, brackets):
    raw = _nested(levels, *brackets)
    with pytest.raises(ValueError, match=r"^nested deeper than 16 levels$"):
        loads_untrusted(raw, BIG, 16)


def test_unclosed_deep_nesting_is_refused_without_recursion_error():
    with pytest.raises(ValueError, match=r"^(nested deeper than 16 levels|not valid JSON \(.*\))$"):
        loads_untrusted(b"[" * 200_000, BIG, 16)


def test_deep_nesting_anywhere_in_a_wide_document_is_found():
    doc = {"wide": list(range(1000)), "x": [{"y": [[["deep"]]]}]}
    raw = json.dumps(doc).encode()
    assert loads_untrusted(raw, BIG, 6) == doc
    with pytest.raises(ValueError, match="nested deeper than 5 levels"):
        loads_untrusted(raw, BIG, 5)


# -- depth() itself ----------------------------------------------------------------------------------

@pytest.mark.parametrize("doc, expected", [
    ({}, 1),
    ([], 1),
    ([1, "a", None], 1),
    ({"a": {"b": {}}}, 3),
    ([[], [[]], [[[]]]], 4),
    ({"k": [1, {"m": [2]}]}, 4),
])
def test_depth_counts_containers(doc, expected):
    assert depth(doc, 100) == expected


def test_depth_stops_counting_past_the_limit():
    doc: list = []
    for _ in range(100_000):  # deeper than Python could recurse
        doc = [doc]
    found = depth(doc, 10)
    assert 10 < found <= 12


def test_depth_of_a_deep_structure_is_counted_without_recursion():
    doc: dict = {}
    for _ in range(50_000):
        doc = {"a": doc}
    assert depth(doc, 10**6) == 50_001


def test_depth_ignores_keys_and_scalars():
    assert depth({"[[[[[": "{{{{{{"}, 100) == 1


# -- duplicate keys --------------------------------------------------------------------------------

def test_duplicate_keys_read_as_the_last_value_as_serde_json_does():
    """Not refused: the last value wins, as in safetensors' own parser, so both read one header."""
    assert loads_untrusted(b'{"a": 1, "a": 2}', BIG, 4) == {"a": 2}
    assert loads_untrusted(b'{"a": {"x": 1}, "a": []}', BIG, 4) == {"a": []}
