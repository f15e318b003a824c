"""Fuzz the GGUF reader with mutated copies of files written by the reference ``gguf``
package: bits flipped in the header, header fields (counts, lengths, types, dimensions,
offsets) given hostile values, the file cut or grown.

For every mutant, ``tensorfile.open`` either succeeds or raises a GGUFError; every read of an
opened file (``get_tensors``, ``get_tensor``, ``view``, ``read_slice``) succeeds or raises a
TensorFileError. When both tensorfile and the reference ``gguf.GGUFReader`` accept a
mutant, they agree on its metadata keys and on each tensor's name, shape, type and offset.
"""

from __future__ import annotations

import struct
import warnings
from pathlib import Path
from typing import Any

import gguf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorfile
from tensorfile.errors import GGUFError, TensorFileError
from tensorfile.gguf import read_header
from tensorfile.sources import MemorySource
from tests.formats.mutants import HOSTILE_U64, gguf_fields, gguf_seeds

FUZZ = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SEED = st.integers(0, len(gguf_seeds()) - 1)


def _read_all(blob: bytes) -> bool:
    """Open ``blob`` and read all of it; True when it opened. Only tensorfile's errors may
    escape: GGUFError from the header, any TensorFileError from a read."""
    try:
        reader = tensorfile.open(blob)
    except GGUFError:
        return False
    except TensorFileError:
        # a mutated magic makes it a file of no known format (UnknownFormatError)
        if blob.startswith(b"GGUF"):
            raise
        return False
    with reader:
        _ = dict(reader.metadata), reader.keys(), repr(reader)
        for read in (reader.get_tensors,):
            try:
                read()
            except TensorFileError:
                pass
        for name in reader.keys():
            for key in (..., 0, -1, slice(None, None, 2)):
                try:
                    reader.read_slice(name, key)
                except TensorFileError:
                    pass
            for fn in (reader.get_tensor, reader.view):
                try:
                    fn(name)
                except TensorFileError:
                    pass
    return True


def _reference(blob: bytes, tmp: Path) -> Any:
    path = tmp / "ref.gguf"
    path.write_bytes(blob)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return gguf.GGUFReader(str(path))
    except Exception:  # the reference's errors are its business
        return None


def _tensors(ours: Any) -> list[tuple[str, list[int], int, int]]:
    return [(t.name, list(t.shape), t.type_id, t.offset) for t in ours.tensors]


def _ref_tensors(ref: Any) -> list[tuple[str, list[int], int, int]]:
    return [
        (t.name, [int(d) for d in t.shape], int(t.tensor_type), int(t.data_offset) - ref_start)
        for t, ref_start in ((t, _data_start(ref)) for t in ref.tensors)
    ]


def _data_start(ref: Any) -> int:
    return int(ref.data_offset)


def check(blob: bytes, tmp: Path) -> None:
    if not _read_all(blob):
        return
    ref = _reference(blob, tmp)
    if ref is None:
        return
    ours = read_header(MemorySource(blob))
    assert set(ours.metadata) == {k for k in ref.fields if not k.startswith("GGUF.")}
    assert _tensors(ours) == _ref_tensors(ref)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ggufz")


def test_seeds_read_and_agree_with_the_reference(tmp: Path) -> None:
    for blob in gguf_seeds():
        assert _read_all(blob)
        ours = read_header(MemorySource(blob))
        ref = _reference(blob, tmp)
        assert ref is not None
        assert set(ours.metadata) == {k for k in ref.fields if not k.startswith("GGUF.")}
        assert _tensors(ours) == _ref_tensors(ref)
        with tensorfile.open(blob) as r:
            got = r.get_tensor("token_embd.weight" if "token_embd.weight" in r else "x")
            assert got.size > 0


@FUZZ
@given(SEED, st.data())
def test_header_bit_flips(tmp: Path, seed: int, data: st.DataObject) -> None:
    blob = bytearray(gguf_seeds()[seed])
    end = gguf_fields(bytes(blob))[-1][0] + 8
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, end - 1))
        blob[at] ^= 1 << data.draw(st.integers(0, 7))
    check(bytes(blob), tmp)


@FUZZ
@given(SEED, st.data())
def test_header_fields_with_hostile_values(tmp: Path, seed: int, data: st.DataObject) -> None:
    blob = gguf_seeds()[seed]
    fields = gguf_fields(blob)
    for _ in range(data.draw(st.integers(1, 2))):
        at, width = data.draw(st.sampled_from(fields))
        if width == 8:
            value = data.draw(st.sampled_from(HOSTILE_U64) | st.integers(0, 2**64 - 1))
        else:
            value = data.draw(st.sampled_from([0, 1, 4, 8, 9, 12, 13, 39, 2**31, 2**32 - 1]))
        blob = blob[:at] + struct.pack("<Q" if width == 8 else "<I", value) + blob[at + width :]
    check(blob, tmp)


@FUZZ
@given(SEED, st.data())
def test_cut_and_grown(tmp: Path, seed: int, data: st.DataObject) -> None:
    blob = gguf_seeds()[seed]
    at = data.draw(st.integers(0, len(blob)))
    if data.draw(st.booleans()):
        check(blob[:at], tmp)
    else:
        check(blob[:at] + data.draw(st.binary(min_size=1, max_size=16)) + blob[at:], tmp)
