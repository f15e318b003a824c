"""GGUF headers: every malformed or hostile header raises GGUFError, and nothing else."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest

from tensorfile import ops
from tensorfile.core.catalog import Catalog
from tensorfile.errors import GGUFError
from tensorfile.gguf import read_header
from tensorfile.sources import MemorySource
from tests.helpers.checkpoints import gguf_blob, gguf_kv, gguf_tensor, gstr

U64_MAX = 2**64 - 1

NAME_KV = gguf_kv("general.name", 8, gstr("tiny"))
COUNT_KV = gguf_kv("n", 4, struct.pack("<I", 3))
W_INFO = gguf_tensor("w", [4, 2], 0, 0)
W_DATA = np.arange(8, dtype="<f4").tobytes()


def _valid(**kw: object) -> bytes:
    args: dict[str, object] = {"kvs": [NAME_KV, COUNT_KV], "tensors": [W_INFO], "data": W_DATA}
    args.update(kw)
    return gguf_blob(**args)  # type: ignore[arg-type]


def _load(tmp_path: Path, blob: bytes) -> Catalog:
    path = tmp_path / "bad.gguf"
    path.write_bytes(blob)
    return ops.load(str(path))


def test_baseline_is_valid(tmp_path: Path) -> None:
    s = _load(tmp_path, _valid())
    assert s.format == "gguf"
    assert s.metadata["general.name"].value == "tiny"
    assert s.metadata["n"].value == 3
    assert [(t.name, t.common_dtype, t.shape, t.nbytes) for t in s.by_name()] == [
        ("w", "F32", (2, 4), 32)
    ]
    assert _load(tmp_path, _valid(version=2)).version == "2"
    aligned = _valid(kvs=[gguf_kv("general.alignment", 4, struct.pack("<I", 64))], alignment=64)
    assert _load(tmp_path, aligned).tensors["w"].nbytes == 32


def test_tensors_that_share_data_are_refused_naming_two(tmp_path: Path) -> None:
    """review35h h10: 64 tensors at one data offset made a file hold 64 times its data
    (ggml's loader refuses them); refused now, naming the first two, as is a tensor that
    starts inside another. Tensors one after the other, and an empty one where the next
    starts, read."""
    shared = [gguf_tensor(f"t{i}", [8], 0, 0) for i in range(64)]
    said = r"tensors 't0' \(data offset 0 to 32\) and 't1' \(from data offset 0\) overlap"
    with pytest.raises(GGUFError, match=said):
        _load(tmp_path, _valid(tensors=shared))
    inside = [gguf_tensor("a", [16], 0, 0), gguf_tensor("b", [8], 0, 32)]
    with pytest.raises(GGUFError, match=r"'a' \(data offset 0 to 64\) and 'b' \(from data"):
        _load(tmp_path, _valid(tensors=inside, data=bytes(64)))
    apart = [
        gguf_tensor("a", [8], 0, 0),
        gguf_tensor("e", [0], 0, 32),
        gguf_tensor("b", [8], 0, 32),
    ]
    assert sorted(_load(tmp_path, _valid(tensors=apart, data=bytes(64))).tensors) == ["a", "b", "e"]


def _arr(elem: int, count: int, payload: bytes = b"") -> bytes:
    return struct.pack("<IQ", elem, count) + payload


CASES: dict[str, Callable[[], bytes]] = {
    # versions
    "version_0": lambda: _valid(version=0),
    "version_1": lambda: _valid(version=1),
    "version_4": lambda: _valid(version=4),
    "version_max": lambda: _valid(version=0xFFFFFFFF),
    "version_big_endian_3": lambda: _valid(version=3 << 24),
    # counts claiming more than the file
    "n_tensors_u64_max": lambda: _valid(n_tensors=U64_MAX),
    "n_kv_u64_max": lambda: _valid(n_kv=U64_MAX),
    "both_counts_2_63": lambda: _valid(n_kv=2**63, n_tensors=2**63),
    "n_kv_one_too_many": lambda: _valid(n_kv=3, data=b""),
    "n_tensors_one_too_many": lambda: _valid(n_tensors=2, data=b""),
    "counts_overflow_u64_when_multiplied": lambda: _valid(n_kv=2**60, n_tensors=2**60),
    # strings running past the end
    "key_length_u64_max": lambda: _valid(kvs=[struct.pack("<Q", U64_MAX)]),
    "key_length_past_eof": lambda: _valid(kvs=[struct.pack("<Q", 10_000) + b"abc"], data=b""),
    "string_value_length_u64_max": lambda: _valid(kvs=[gstr("k") + struct.pack("<IQ", 8, U64_MAX)]),
    "string_value_length_past_eof": lambda: _valid(
        kvs=[gstr("k") + struct.pack("<IQ", 8, 100_000) + b"short"]
    ),
    "tensor_name_length_u64_max": lambda: _valid(tensors=[struct.pack("<Q", U64_MAX)]),
    "string_array_element_length_past_eof": lambda: _valid(
        kvs=[gstr("k") + struct.pack("<I", 9) + _arr(8, 1, struct.pack("<Q", 2**40))]
    ),
    # arrays
    "u8_array_count_u64_max": lambda: _valid(
        kvs=[gstr("k") + struct.pack("<I", 9) + _arr(0, U64_MAX)]
    ),
    "u64_array_count_2_61": lambda: _valid(
        kvs=[gstr("k") + struct.pack("<I", 9) + _arr(10, 2**61)]
    ),
    "string_array_count_2_62": lambda: _valid(
        kvs=[gstr("k") + struct.pack("<I", 9) + _arr(8, 2**62)]
    ),
    "f32_array_count_past_eof": lambda: _valid(
        kvs=[gstr("k") + struct.pack("<I", 9) + _arr(6, 1_000, b"\0" * 8)], data=b""
    ),
    "nested_array": lambda: _valid(kvs=[gstr("k") + struct.pack("<I", 9) + _arr(9, 1)]),
    "array_of_unknown_type": lambda: _valid(kvs=[gstr("k") + struct.pack("<I", 9) + _arr(99, 1)]),
    "unknown_value_type": lambda: _valid(kvs=[gstr("k") + struct.pack("<I", 13) + b"\0" * 8]),
    "value_type_u32_max": lambda: _valid(kvs=[gstr("k") + struct.pack("<I", 0xFFFFFFFF)]),
    # tensor infos
    "nine_dims": lambda: _valid(tensors=[gguf_tensor("w", [1] * 9)]),
    "dims_u32_max": lambda: _valid(tensors=[gstr("w") + struct.pack("<I", 0xFFFFFFFF)]),
    "dims_past_eof": lambda: _valid(tensors=[gstr("w") + struct.pack("<IQ", 4, 2)], data=b""),
    "duplicate_tensor": lambda: _valid(tensors=[W_INFO, W_INFO]),
    "duplicate_key": lambda: _valid(kvs=[NAME_KV, NAME_KV]),
    "key_not_utf8": lambda: _valid(kvs=[gguf_kv(b"\xff\xfe", 4, struct.pack("<I", 1))]),
    "string_not_utf8": lambda: _valid(kvs=[gguf_kv("k", 8, gstr(b"\xc3\x28"))]),
    "tensor_name_not_utf8": lambda: _valid(tensors=[gstr(b"\x80") + W_INFO[len(gstr("w")) :]]),
    # tensor data past the end of the file
    "tensor_data_past_eof": lambda: _valid(data=W_DATA[:-1]),
    "tensor_no_data_at_all": lambda: _valid(data=b""),
    "tensor_offset_past_eof": lambda: _valid(tensors=[gguf_tensor("w", [4, 2], 0, 1 << 20)]),
    "tensor_offset_u64_max_aligned": lambda: _valid(
        tensors=[gguf_tensor("w", [4, 2], 0, U64_MAX - 31)]
    ),
    "tensor_huge_shape": lambda: _valid(tensors=[gguf_tensor("w", [2**32, 2**32], 0, 0)]),
    "tensor_shape_bytes_wrap_u64": lambda: _valid(tensors=[gguf_tensor("w", [2**62, 4], 0, 0)]),
    "quantized_tensor_past_eof": lambda: _valid(tensors=[gguf_tensor("w", [256], 12, 0)]),
    "tensor_misaligned_offset": lambda: _valid(tensors=[gguf_tensor("w", [2], 0, 4)]),
    # claims over tensorfile's limits (refused before the bytes are looked for)
    "string_value_over_64MiB": lambda: _valid(
        kvs=[gstr("k") + struct.pack("<IQ", 8, 64 << 20 | 1)]
    ),
    "key_over_64KiB": lambda: _valid(kvs=[struct.pack("<Q", 1 << 16 | 1)]),
    "tensor_name_over_64KiB": lambda: _valid(tensors=[struct.pack("<Q", 1 << 16 | 1)]),
    "array_count_over_2_24": lambda: _valid(
        kvs=[gstr("k") + struct.pack("<I", 9) + _arr(0, (1 << 24) + 1)]
    ),
    "string_array_element_over_64MiB": lambda: _valid(
        kvs=[gstr("k") + struct.pack("<I", 9) + _arr(8, 1, struct.pack("<Q", 64 << 20 | 1))]
    ),
    # ggml's shape rules
    "shape_elements_over_i64": lambda: _valid(tensors=[gguf_tensor("w", [2**62, 2, 0], 0, 0)]),
    "dim_over_i64": lambda: _valid(tensors=[gguf_tensor("w", [2**63], 0, 0)]),
    "q8_0_row_of_8": lambda: _valid(tensors=[gguf_tensor("w", [8], 8, 0)]),
    "q4_k_row_of_32": lambda: _valid(tensors=[gguf_tensor("w", [32, 8], 12, 0)]),
    # alignment key
    "alignment_zero": lambda: _valid(kvs=[gguf_kv("general.alignment", 4, struct.pack("<I", 0))]),
    "alignment_not_multiple_of_8": lambda: _valid(
        kvs=[gguf_kv("general.alignment", 4, struct.pack("<I", 12))]
    ),
    "alignment_as_string": lambda: _valid(kvs=[gguf_kv("general.alignment", 8, gstr("32"))]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_header_raises_gguf_error(tmp_path: Path, case: str) -> None:
    blob = CASES[case]()
    assert blob[:4] == b"GGUF"
    with pytest.raises(GGUFError) as info:
        _load(tmp_path, blob)
    assert type(info.value) is GGUFError
    with pytest.raises(GGUFError):
        read_header(MemorySource(blob))
    # every op that reads the header reports the same error class
    path = str(tmp_path / "bad.gguf")
    for op in (ops.inspect, ops.structural_hash, ops.read_metadata):
        with pytest.raises(GGUFError):
            op(path)


@pytest.mark.parametrize("magic", [b"GGUX", b"FUGG", b"\0\0\0\0", b"ggml", b"GGU"])
def test_bad_magic(magic: bytes) -> None:
    blob = magic + _valid()[4:]
    with pytest.raises(GGUFError):
        read_header(MemorySource(blob))


@pytest.mark.parametrize("length", [0, 1, 3])
def test_shorter_than_magic(length: int) -> None:
    with pytest.raises(GGUFError):
        read_header(MemorySource(b"GGUF"[:length]))


def _writer_file(path: Path) -> tuple[bytes, int]:
    """A real file from gguf.GGUFWriter and the end of its last tensor's data."""
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_uint32("llama.block_count", 1)
    w.add_string("general.name", "tiny model")
    w.add_array("tokenizer.ggml.tokens", ["a", "bb", "ccc"])
    w.add_array("tokenizer.ggml.scores", [0.5, 0.25, 0.125])
    w.add_tensor("token_embd.weight", np.ones((3, 4), np.float32))
    w.add_tensor("blk.0.q", np.zeros((1, 34), np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    blob = path.read_bytes()
    h = read_header(MemorySource(blob))
    end = max(h.data_start + t.offset + (t.byte_length or 0) for t in h.tensors)
    return blob, end


def test_every_truncation_raises_gguf_error(tmp_path: Path) -> None:
    blob, end = _writer_file(tmp_path / "ok.gguf")
    assert ops.load(str(tmp_path / "ok.gguf")).format == "gguf"
    read_header(MemorySource(blob[:end]))  # the data's end is enough
    cut_path = tmp_path / "cut.gguf"
    for n in range(end):
        with pytest.raises(GGUFError):
            read_header(MemorySource(blob[:n]))
        if n >= 4 and n % 5 == 0:
            cut_path.write_bytes(blob[:n])
            with pytest.raises(GGUFError):
                ops.load(str(cut_path))


def test_string_arrays_across_read_chunks_match_the_reference(tmp_path: Path) -> None:
    # strings are parsed straight out of 1 MiB chunks: elements that cross a chunk's end,
    # elements larger than a chunk, and multi-byte UTF-8 at the edges all come out whole
    items = [f"t{i}" for i in range(150_000)]
    items[40_000] = "b" * (3 << 20)  # larger than a chunk
    items[70_000] = "é" * 600_000  # 1.2 MB of two-byte characters
    items[90_000] = ""
    path = tmp_path / "strings.gguf"
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_array("tokenizer.ggml.tokens", items)
    w.add_array("after", [1, 2, 3])
    w.add_tensor("w", np.ones(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    blob = path.read_bytes()
    h = read_header(MemorySource(blob))
    assert h.metadata["tokenizer.ggml.tokens"].value == items
    assert h.metadata["after"].value == [1, 2, 3]
    ref = gguf.GGUFReader(str(path)).fields["tokenizer.ggml.tokens"]
    assert [bytes(ref.parts[i]).decode() for i in ref.data[:5]] == items[:5]
    # a bad element deep in the array is reported at its own offset
    at = blob.index(b"t120000")
    bad = blob[:at] + b"\xff" + blob[at + 1 :]
    with pytest.raises(GGUFError, match=r"tokenizer.ggml.tokens'\[120000\] is not UTF-8"):
        read_header(MemorySource(bad))
