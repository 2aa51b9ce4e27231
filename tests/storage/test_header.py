"""The safetensors header checked by hand (woolf/storage/header.py), file by hostile file.

Every file here is built byte by byte (struct + json) as an attacker who read the code would;
each refusal is an InvalidWeightsError whose message starts with the caller's label and names
the problem. One file written by safetensors itself must pass, and read as safetensors reads it.
"""

from __future__ import annotations

import json
import os
import re
import struct

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from woolf.errors import InvalidWeightsError
from woolf.protocol.config import LimitsConfig
from woolf.storage import header as header_module
from woolf.storage.header import header, read_spec

pytestmark = pytest.mark.unit

LIMITS = LimitsConfig()
LABEL = "delta"
SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
         "BOOL": 1}


def _file(head: dict | list | str | bytes, body: bytes = b"", length: int | None = None) -> bytes:
    """Length prefix (``length``, or the header's true length), the header, then ``body``."""
    raw = head if isinstance(head, bytes) else json.dumps(head).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + body


def _entry(dtype="F32", shape=(2,), begin=0, end=None) -> dict:
    end = begin + SIZES.get(dtype, 4) * int(np.prod(shape, dtype=np.int64)) if end is None else end
    return {"dtype": dtype, "shape": list(shape), "data_offsets": [begin, end]}


@pytest.fixture
def write(tmp_path):
    def _write(data: bytes, name: str = "x.safetensors"):
        p = tmp_path / name
        p.write_bytes(data)
        return p
    return _write


def _refused(path, match: str, limits: LimitsConfig = LIMITS) -> InvalidWeightsError:
    """The InvalidWeightsError ``header`` raises; its message (without the hint) matches ``match``."""
    with pytest.raises(InvalidWeightsError) as info:
        header(path, limits, LABEL)
    err = info.value
    assert type(err) is InvalidWeightsError
    assert err.message.startswith(f"{LABEL}: "), err.message
    assert re.search(match, err.message), (match, err.message)
    return err


# -- accepting -------------------------------------------------------------------------------------

def test_a_file_written_by_safetensors_passes_and_reads_as_safetensors_reads_it(tmp_path):
    arrays = {
        "w": np.arange(12, dtype=np.float32).reshape(3, 4),
        "b": np.ones(5, dtype=np.float16),
        "ids": np.array([1, -2, 3], dtype=np.int64),
        "mask": np.array([True, False]),
        "byte": np.zeros((2, 0, 3), dtype=np.uint8),
        "scalar": np.array(7.0, dtype=np.float64),
    }
    p = tmp_path / "real.safetensors"
    save_file(arrays, str(p), metadata={"format": "np", "note": "é"})
    spec, offsets, start, raw = header(p, LIMITS, LABEL)
    data = p.read_bytes()
    assert spec == {"w": ("F32", (3, 4)), "b": ("F16", (5,)), "ids": ("I64", (3,)),
                    "mask": ("BOOL", (2,)), "byte": ("U8", (2, 0, 3)), "scalar": ("F64", ())}
    assert start == 8 + struct.unpack("<Q", data[:8])[0]
    assert raw == data[:start]
    for name, (begin, end) in offsets.items():
        assert np.frombuffer(data[start + begin:start + end], dtype=arrays[name].dtype).tobytes() \
            == arrays[name].tobytes()
    assert read_spec(p, LIMITS) == spec
    with safe_open(str(p), framework="numpy") as f:
        assert sorted(f.keys()) == sorted(spec)


def test_a_minimal_hand_made_file_passes(write):
    p = write(_file({"t": _entry("F32", (2,))}, b"\0" * 8))
    spec, offsets, start, raw = header(p, LIMITS, LABEL)
    assert spec == {"t": ("F32", (2,))}
    assert offsets == {"t": (0, 8)}
    assert start == len(raw) == p.stat().st_size - 8


def test_an_empty_header_with_no_data_passes(write):
    assert header(write(_file({})), LIMITS, LABEL)[:3] == ({}, {}, 10)


@pytest.mark.parametrize("dtype", sorted(SIZES))
def test_every_supported_dtype_passes_with_its_element_size(write, dtype):
    p = write(_file({"t": _entry(dtype, (3,))}, b"\0" * (3 * SIZES[dtype])))
    assert read_spec(p, LIMITS) == {"t": (dtype, (3,))}


def test_tensors_listed_out_of_order_that_tile_the_data_pass(write):
    head = {"second": _entry("F32", (1,), 4), "first": _entry("F32", (1,), 0),
            "third": _entry("U8", (2,), 8)}
    spec, offsets, _, _ = header(write(_file(head, b"\0" * 10)), LIMITS, LABEL)
    assert offsets == {"second": (4, 8), "first": (0, 4), "third": (8, 10)}
    assert set(spec) == set(head)


def test_zero_sized_tensors_at_the_edges_pass(write):
    head = {"a": _entry("F32", (0,), 0, 0), "b": _entry("F32", (1,), 0), "c": _entry("I8", (0, 5), 4, 4)}
    assert read_spec(write(_file(head, b"\0" * 4)), LIMITS)["c"] == ("I8", (0, 5))


def test_a_header_padded_with_trailing_spaces_passes(write):
    raw = json.dumps({"t": _entry("U8", (1,))}).encode() + b"       "
    assert read_spec(write(_file(raw, b"\0")), LIMITS) == {"t": ("U8", (1,))}


@pytest.mark.parametrize("meta", [None, {}, {"format": "pt", "a": ""}])
def test_metadata_of_strings_passes_and_is_not_a_tensor(write, meta):
    head = {"__metadata__": meta, "t": _entry("U8", (1,))}
    assert read_spec(write(_file(head, b"\0")), LIMITS) == {"t": ("U8", (1,))}


def test_read_spec_labels_its_errors_weights_by_default(write):
    with pytest.raises(InvalidWeightsError, match=r"^weights: truncated file"):
        read_spec(write(b"\0" * 3), LIMITS)


def test_a_duplicate_tensor_name_reads_as_safetensors_reads_it(write):
    """Duplicate keys: the last entry counts, in woolf as in safetensors, so both see one tensor."""
    raw = (b'{"t": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]},'
           b' "t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}')
    p = write(_file(raw, b"\0" * 4))
    assert read_spec(p, LIMITS) == {"t": ("F32", (1,))}
    with safe_open(str(p), framework="numpy") as f:
        assert f.get_tensor("t").dtype == np.float32


def test_a_duplicate_name_whose_first_entry_held_bytes_leaves_a_gap(write):
    raw = (b'{"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},'
           b' "t": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}')
    _refused(write(_file(raw, b"\0" * 8)), r"gap at byte 4")


# -- what is opened --------------------------------------------------------------------------------

def test_a_missing_file_is_named(tmp_path):
    _refused(tmp_path / "nope.safetensors", r"^delta: .*nope\.safetensors does not exist$")


def test_a_directory_is_not_a_regular_file(tmp_path):
    (tmp_path / "d.safetensors").mkdir()
    _refused(tmp_path / "d.safetensors", r"^delta: d\.safetensors is not a regular file$")


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    _refused(fifo, r"^delta: pipe\.safetensors is not a regular file$")


def test_a_character_device_is_refused():
    _refused("/dev/zero", r"^delta: zero is not a regular file$")


def test_a_symlink_loop_cannot_be_opened(tmp_path):
    loop = tmp_path / "loop.safetensors"
    loop.symlink_to(loop)
    _refused(loop, r"^delta: loop\.safetensors cannot be opened as a plain file \(.+\)$")


# -- sizes -----------------------------------------------------------------------------------------

def test_a_file_over_max_delta_bytes_is_refused_with_a_hint(write):
    p = write(_file({"t": _entry("U8", (40,))}, b"\0" * 40))
    size = p.stat().st_size
    err = _refused(p, rf"^delta: file is {size} bytes, over the ledger's limit of {size - 1}$",
                   LimitsConfig(max_delta_bytes=size - 1))
    assert err.hint == "limits.max_delta_bytes in ledger/woolf.toml"
    assert read_spec(p, LimitsConfig(max_delta_bytes=size)) == {"t": ("U8", (40,))}


def test_a_sparse_file_over_max_delta_bytes_is_refused_by_its_size(tmp_path):
    p = tmp_path / "huge.safetensors"
    with open(p, "wb") as fh:
        fh.truncate(LIMITS.max_delta_bytes + 1)
    _refused(p, rf"file is {LIMITS.max_delta_bytes + 1} bytes, over the ledger's limit")


@pytest.mark.parametrize("size", [0, 1, 7])
def test_a_file_shorter_than_the_length_field_is_truncated(write, size):
    _refused(write(b"\x01" * size), rf"^delta: truncated file \({size} bytes\), not safetensors$")


@pytest.mark.parametrize("length", [3, 100, 2**32, 2**63, 2**64 - 1])
def test_a_header_length_past_the_end_of_the_file_is_impossible(write, length):
    p = write(_file(b"{}", length=length))
    _refused(p, rf"^delta: header length {length} is impossible for a 10-byte file "
                rf"\(limit {LIMITS.max_header_bytes}\); not a safetensors file, or truncated$")


def test_a_header_length_over_max_header_bytes_is_refused_before_it_is_read(write):
    head = json.dumps({"t": _entry("U8", (1,))}).encode()
    p = write(_file(head, b"\0"))
    limits = LimitsConfig(max_header_bytes=len(head) - 1)
    _refused(p, rf"header length {len(head)} is impossible .* \(limit {len(head) - 1}\)", limits)
    assert read_spec(p, LimitsConfig(max_header_bytes=len(head))) == {"t": ("U8", (1,))}


def test_a_zero_header_length_is_not_json(write):
    _refused(write(struct.pack("<Q", 0) + b"\0" * 8), r"header is not a safetensors header: not valid JSON")


def test_a_pickle_is_refused_by_its_length_field(write):
    _refused(write(b"\x80\x04\x95" + b"\0" * 100), r"header length \d+ is impossible")


def test_at_most_the_length_field_and_the_header_are_read(tmp_path, monkeypatch):
    """A 1 GiB sparse file with a small header: the reader asks for 8 bytes and then the header only."""
    head = json.dumps({"t": _entry("U8", (1 << 30,))}).encode()
    p = tmp_path / "big.safetensors"
    with open(p, "wb") as fh:
        fh.write(struct.pack("<Q", len(head)) + head)
        fh.truncate(8 + len(head) + (1 << 30))
    asked: list = []
    real_fdopen = os.fdopen

    class Counting:
        def __init__(self, fh):
            self._fh = fh

        def read(self, n=-1):
            asked.append(n)
            return self._fh.read(n)

        def __getattr__(self, name):
            return getattr(self._fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._fh.close()

    monkeypatch.setattr(header_module.os, "fdopen", lambda fd, mode: Counting(real_fdopen(fd, mode)))
    assert read_spec(p, LIMITS) == {"t": ("U8", (1 << 30,))}
    assert asked == [8, len(head)]


# -- the header document ---------------------------------------------------------------------------

@pytest.mark.parametrize("raw, needle", [
    (b"\xff\xfe{}", r"not valid JSON \(not UTF-8\)"),
    (b'{"t": ', r"not valid JSON \(Expecting value at byte 6\)"),
    (b"{} {}", r"not valid JSON \(Extra data at byte 3\)"),
    (b'{"t": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 0]}}', r"NaN is not JSON"),
    (b'{"t": {"dtype": "F32", "shape": [Infinity], "data_offsets": [0, 0]}}', r"Infinity is not JSON"),
    (b'{"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, -Infinity]}}', r"-Infinity is not JSON"),
    (b'{"t": {"dtype": [[[["F32"]]]], "shape": [1], "data_offsets": [0, 4]}}', r"nested deeper than 4 levels"),
    (b"[" * 50_000 + b"]" * 50_000, r"nested deeper than 4 levels"),
    (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, r"nested deeper than 4 levels"),
])
def test_a_header_that_is_not_safe_json_is_refused(write, raw, needle):
    _refused(write(_file(raw)), r"^delta: header is not a safetensors header: " + needle)


@pytest.mark.parametrize("doc", [[], [1, 2], "text", 3, None, True])
def test_a_header_that_is_not_an_object_is_refused(write, doc):
    _refused(write(_file(doc)), r"^delta: header is not a JSON object$")


@pytest.mark.parametrize("meta", [[], "x", 1, {"a": 1}, {"a": None}, {"a": ["x"]}, {"a": {"b": "c"}}])
def test_metadata_that_is_not_a_map_of_strings_is_refused(write, meta):
    head = {"__metadata__": meta, "t": _entry("U8", (1,))}
    _refused(write(_file(head, b"\0")), r"^delta: __metadata__ is not a map of strings$")


def test_more_tensors_than_max_tensors_are_refused_and_metadata_does_not_count(write):
    head = {"__metadata__": {"a": "b"}, **{f"t{i}": _entry("U8", (1,), i) for i in range(3)}}
    p = write(_file(head, b"\0" * 3))
    _refused(p, r"^delta: 3 tensors, over the limit of 2$", LimitsConfig(max_tensors=2))
    assert len(read_spec(p, LimitsConfig(max_tensors=3))) == 3


def test_a_tensor_name_that_safetensors_refuses_is_refused(write):
    raw = b'{"\\ud800": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
    p = write(_file(raw, b"\0" * 4))
    with pytest.raises(Exception, match="hex escape"):  # what safetensors itself says
        safe_open(str(p), framework="numpy")
    _refused(p, r"not a safetensors header")


# -- one entry -------------------------------------------------------------------------------------

@pytest.mark.parametrize("info", [
    None, 1, "F32", [], ["F32", [1], [0, 4]],
    {"dtype": "F32", "shape": [1]},
    {"shape": [1], "data_offsets": [0, 4]},
    {"dtype": "F32", "data_offsets": [0, 4]},
    {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "extra": 1},
    {"DTYPE": "F32", "shape": [1], "data_offsets": [0, 4]},
])
def test_a_malformed_entry_is_refused_by_name(write, info):
    _refused(write(_file({"w.0": info}, b"\0" * 4)), r"^delta: malformed header entry 'w\.0'$")


def test_a_long_hostile_name_is_cut_in_the_message(write):
    name = "n" * 10_000
    err = _refused(write(_file({name: None})), r"malformed header entry 'n{80}'$")
    assert len(err.message) < 200


@pytest.mark.parametrize("dtype", [
    "f32", "F8_E4M3", "F8_E5M2", "C64", "U16", "U32", "U64", "F32 ", "", None, 4, True, ["F32"],
    {"F32": 4},
])
def test_an_unsupported_dtype_is_refused(write, dtype):
    head = {"t": {"dtype": dtype, "shape": [1], "data_offsets": [0, 4]}}
    _refused(write(_file(head, b"\0" * 4)), r"^delta: tensor 't' has unsupported dtype ")


def test_an_unsupported_dtype_value_is_cut_in_the_message(write):
    head = {"t": {"dtype": "X" * 5000, "shape": [1], "data_offsets": [0, 4]}}
    err = _refused(write(_file(head, b"\0" * 4)), r"unsupported dtype X{40}$")
    assert len(err.message) < 120


@pytest.mark.parametrize("shape", [
    None, 2, "2", {"0": 2}, [2.0], [1.5], ["2"], [True], [False], [None], [[2]], [1] * 17,
])
def test_a_shape_that_is_not_a_list_of_integers_is_refused(write, shape):
    head = {"t": {"dtype": "U8", "shape": shape, "data_offsets": [0, 2]}}
    _refused(write(_file(head, b"\0" * 2)), r"^delta: tensor 't' has a shape that is not a list of integers$")


def test_sixteen_dimensions_are_allowed(write):
    head = {"t": {"dtype": "U8", "shape": [1] * 16, "data_offsets": [0, 1]}}
    assert read_spec(write(_file(head, b"\0")), LIMITS) == {"t": ("U8", (1,) * 16)}


@pytest.mark.parametrize("shape", [[-1], [2, -1], [-2, -3], [0, -1]])
def test_a_negative_dimension_is_refused(write, shape):
    head = {"t": {"dtype": "U8", "shape": shape, "data_offsets": [0, 2]}}
    _refused(write(_file(head, b"\0" * 2)), r"^delta: tensor 't' has a negative dimension$")


@pytest.mark.parametrize("offsets", [
    None, 0, "0,4", [0], [0, 4, 8], [0.0, 4.0], [0, 4.0], ["0", "4"], [False, True], [None, 4],
    {"begin": 0, "end": 4},
])
def test_data_offsets_that_are_not_two_integers_are_refused(write, offsets):
    head = {"t": {"dtype": "F32", "shape": [1], "data_offsets": offsets}}
    _refused(write(_file(head, b"\0" * 4)), r"^delta: tensor 't' has data_offsets that are not two integers$")


@pytest.mark.parametrize("shape, offsets, data", [
    ([1], [-4, 0], 4),              # begins before the data
    ([1], [4, 0], 4),               # ends before it begins
    ([1], [4, 8], 4),               # past the end of the file
    ([1], [0, 8], 8),               # more bytes than the shape holds
    ([2], [0, 4], 8),               # fewer bytes than the shape holds
    ([1], [2**64, 2**64 + 4], 4),   # far past the end
    ([2**62, 2**62], [0, 4], 4),    # element count that overflows 64 bits
    ([2**32, 2**32], [0, 0], 4),    # numel * size wraps to 0 in 64-bit arithmetic
    ([0], [0, 4], 4),               # an empty tensor holding bytes
])
def test_offsets_that_do_not_match_the_shape_or_the_file_are_refused(write, shape, offsets, data):
    head = {"t": {"dtype": "F32", "shape": shape, "data_offsets": offsets}}
    _refused(write(_file(head, b"\0" * data)), r"^delta: tensor 't' has offsets outside the file$")


def test_offsets_are_relative_to_the_data_not_the_file(write):
    """An offset counted from the start of the file (past the header) is outside the data."""
    head_len = len(json.dumps({"t": _entry("U8", (4,), 0)}).encode())
    head = {"t": _entry("U8", (4,), 8 + head_len)}
    _refused(write(_file(head, b"\0" * 4)), r"offsets outside the file")


# -- tiling ----------------------------------------------------------------------------------------

def test_two_tensors_sharing_bytes_overlap(write):
    head = {"a": _entry("F32", (1,), 0), "b": _entry("F32", (1,), 0)}
    _refused(write(_file(head, b"\0" * 4)), r"^delta: tensor data overlaps or leaves a gap at byte 0$")


def test_partially_overlapping_tensors_are_refused(write):
    head = {"a": _entry("F32", (2,), 0), "b": _entry("F32", (2,), 4)}
    _refused(write(_file(head, b"\0" * 12)), r"^delta: tensor data overlaps or leaves a gap at byte 4$")


def test_a_zero_sized_tensor_inside_another_is_an_overlap(write):
    head = {"a": _entry("F32", (1,), 0), "z": _entry("F32", (0,), 2, 2)}
    _refused(write(_file(head, b"\0" * 4)), r"overlaps or leaves a gap at byte 2$")


def test_a_gap_between_tensors_is_refused(write):
    head = {"a": _entry("F32", (1,), 0), "b": _entry("F32", (1,), 8)}
    _refused(write(_file(head, b"\0" * 12)), r"^delta: tensor data overlaps or leaves a gap at byte 8$")


def test_a_gap_before_the_first_tensor_is_refused(write):
    _refused(write(_file({"a": _entry("F32", (1,), 4)}, b"\0" * 8)), r"overlaps or leaves a gap at byte 4$")


@pytest.mark.parametrize("extra", [1, 4, 1000])
def test_bytes_after_the_last_tensor_are_refused(write, extra):
    p = write(_file({"a": _entry("F32", (1,), 0)}, b"\0" * (4 + extra)))
    _refused(p, rf"^delta: {extra} bytes after the last tensor; not safetensors$")


def test_data_with_no_tensors_is_refused(write):
    _refused(write(_file({}, b"\0" * 16)), r"^delta: 16 bytes after the last tensor; not safetensors$")


def test_data_cut_short_is_refused(write):
    """The file ends before the data the header describes: the offsets lie outside it."""
    p = write(_file({"a": _entry("F32", (4,), 0)}, b"\0" * 15))
    _refused(p, r"tensor 'a' has offsets outside the file")
