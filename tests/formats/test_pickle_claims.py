"""An old-format (not zip) PyTorch pickle's storage sizes are claims: torch's legacy loader
allocates what each storage's persistent id says before reading its bytes, so tensorfile
reads the ids first (nothing run) and refuses a pickle claiming more than the file holds
(review35f f05: a 512 KB file made ``torch.load`` allocate 16 GiB)."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest
import torch

import tensorfile
from tensorfile.errors import FormatError
from tests.formats.limits import GIB, run_limited


def _legacy(value: object, protocol: int = 2) -> bytes:
    buf = io.BytesIO()
    torch.save(value, buf, _use_new_zipfile_serialization=False, pickle_protocol=protocol)
    return buf.getvalue()


def _forged(numel: int) -> bytes:
    """A float64 storage of 65,536 elements (512 KiB, all in the file) whose persistent id
    claims ``numel`` elements."""
    data = _legacy({"w": torch.zeros(65536, dtype=torch.float64)})
    needle = b"J" + struct.pack("<i", 65536)  # BININT 65536: the id's element count
    at = data.index(needle)
    return data[:at] + b"J" + struct.pack("<i", numel) + data[at + len(needle) :]


_OPEN = """
import sys, tensorfile
from tensorfile.ops import convert, verify
for op in (tensorfile.open, verify, lambda p: convert(p, p + ".safetensors")):
    try:
        op({path!r})
        print("read")
    except tensorfile.TensorFileError as exc:
        print(type(exc).__name__, str(exc).split(": ", 1)[1])
"""


def test_a_claim_beyond_the_file_is_refused_before_torch_allocates(tmp_path: Path) -> None:
    """2**31-1 float64 elements (16 GiB) claimed by a 512 KB file, opened, verified and
    converted under a 4 GiB address-space limit: a FormatError saying what is claimed and
    held, never torch's allocation of the claim."""
    path = tmp_path / "legacy.pt"
    path.write_bytes(_forged(2**31 - 1))
    printed, _peak = run_limited(_OPEN.format(path=str(path)), address_space=4 * GIB)
    lines = printed.splitlines()
    assert len(lines) == 3, printed
    for line in lines:
        assert line.startswith("FormatError storage "), line
        assert "claims 17,179,869,176 bytes, but the file holds 524,288 after" in line, line
    assert not (tmp_path / "legacy.pt.safetensors").exists()


def test_a_claim_a_little_over_what_is_held_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "over.pt"
    path.write_bytes(_forged(65536 + 4096))
    with pytest.raises(FormatError, match=r"claims 557,056 bytes, but the file holds 524,288 "):
        tensorfile.open(str(path))


_TRACED = """
import tracemalloc, tensorfile
tracemalloc.start()
try:
    tensorfile.open({path!r})
    print("read")
except tensorfile.TensorFileError as exc:
    print(type(exc).__name__)
    assert "1,073,741,824" in str(exc) or "1073741824" in str(exc), exc
print("TRACED", tracemalloc.get_traced_memory()[1])
"""


def test_a_string_claiming_more_than_the_file_allocates_nothing(tmp_path: Path) -> None:
    """A text value in an old-format pickle whose length claims 1 GiB: read through a file
    object whose ``read(n)`` asks for no more than the file holds (``io.BufferedReader``
    allocates ``n`` first), so the claim is never an allocation, by tensorfile's scan or by
    torch's unpickler."""
    data = _legacy({"w": torch.zeros(4), "note": "hello"})
    needle = b"X" + struct.pack("<I", 5) + b"hello"  # BINUNICODE: a 4-byte length, then text
    at = data.index(needle)
    path = tmp_path / "text.pt"
    path.write_bytes(data[:at] + b"X" + struct.pack("<I", 1 << 30) + data[at + 5 :])
    printed, _peak = run_limited(_TRACED.format(path=str(path)), address_space=4 * GIB)
    outcome, traced = printed.splitlines()
    assert outcome == "FormatError", printed
    assert int(traced.split()[1]) < 64 << 20, traced


@pytest.mark.parametrize("protocol", [2, 3])
def test_whole_old_format_pickles_open_in_every_protocol(tmp_path: Path, protocol: int) -> None:
    """Shared storages, views, several dtypes and plain values: each storage counted once,
    at its element size, and every claim held."""
    base = torch.arange(10, dtype=torch.float64)
    state = {"a": base, "view": base[2:5], "again": base, "b": torch.ones(3, dtype=torch.bfloat16),
             "c": [torch.arange(4, dtype=torch.int32)], "epoch": 3}  # fmt: skip
    data = _legacy(state, protocol)
    path = tmp_path / "ok.pt"
    path.write_bytes(data)
    with tensorfile.open(str(path)) as f:
        assert f.get_tensor("view").tolist() == [2.0, 3.0, 4.0]
        assert f.get_tensor("c.0").tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("protocol", [4, 5])
def test_protocols_torch_cannot_read_are_refused_by_the_scan(tmp_path: Path, protocol: int) -> None:
    """torch's weights-only unpickler reads no FRAME (protocol 4 and 5): the scan, which
    reads what it reads, refuses such a pickle before torch runs any of it."""
    path = tmp_path / "p.pt"
    path.write_bytes(_legacy({"w": torch.zeros(2)}, protocol))
    with pytest.raises(FormatError, match=r"does not read \(opcode 0x95 at offset 2\)"):
        tensorfile.open(str(path))
