"""An ``.npz`` member's zip CRC-32 is a digest the file stores, and every whole read checks
it: a stored member however big (read in the planner's pieces, the content id's chunks, in
any order), a deflated one as it inflates. ``verify`` compares them and says so, ``convert``
refuses a member they prove changed (review35f f03: a stored member of 16 MiB or more was
never checked, and ``convert --checksum`` wrote its changed bytes under fresh digests)."""

from __future__ import annotations

import random
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorfile
from tensorfile.errors import ChecksumError, FormatError, NpzChecksumError
from tensorfile.formats._zipcrc import crc32_combine
from tensorfile.ops import content_hash, convert, verify
from tests.helpers.cli import run

_BIG = 5 << 20  # float32 elements: a 20 MiB member, more than one 16 MiB piece or chunk


def _flipped(path: Path, count: int, *, at: float = 100.0) -> Path:
    """``np.savez`` of ``arange(count)`` as float32 in ``path``, with one bit of the value
    ``at`` flipped afterwards (the archive's CRC-32 says the member changed)."""
    np.savez(path, w=np.arange(count, dtype=np.float32))
    data = bytearray(path.read_bytes())
    data[data.index(np.float32(at).tobytes())] ^= 1
    path.write_bytes(bytes(data))
    assert zipfile.ZipFile(path).testzip() == "w.npy"
    return path


def test_a_big_stored_member_changed_fails_every_whole_read(tmp_path: Path) -> None:
    """f03: get_tensor, the content id, verify and convert --checksum all refuse it."""
    path = _flipped(tmp_path / "big.npz", _BIG)
    with tensorfile.open(path) as r, pytest.raises(ChecksumError, match=r"member w\.npy: Bad CRC"):
        r.get_tensor("w")
    with pytest.raises(ChecksumError, match=r"member w\.npy"):
        content_hash(str(path))
    report = verify(str(path))
    assert [(f.subject, f.rule) for f in report.failures] == [("w", "digest")]
    out = tmp_path / "out.safetensors"
    with pytest.raises(ChecksumError, match=r"member w\.npy"):
        convert(path, out, checksum="sha256")
    assert not out.exists()


def test_the_error_is_a_format_error_and_a_checksum_error(tmp_path: Path) -> None:
    path = _flipped(tmp_path / "small.npz", 1000)
    with tensorfile.open(path) as r, pytest.raises(NpzChecksumError) as err:
        r.get_tensor("w")
    assert isinstance(err.value, FormatError) and isinstance(err.value, ChecksumError)
    assert err.value.format == "npz"
    assert str(err.value).startswith(f"{path}: member w.npy: Bad CRC-32 (the archive says ")


def test_pieces_read_in_any_order_check_the_member_once_whole(tmp_path: Path) -> None:
    """Reads of a member in shuffled pieces (as parallel readers finish them) check it once
    the last byte is in; a slice alone checks nothing (documented), and once the member is
    known changed every read that touches it fails."""
    count = 1 << 18  # 1 MiB
    np.savez(tmp_path / "ok.npz", w=np.arange(count, dtype=np.float32))
    bad = _flipped(tmp_path / "bad.npz", count)
    for path, damaged in ((tmp_path / "ok.npz", False), (bad, True)):
        with tensorfile.open(path) as r:
            rng = r.info("w").byte_range
            starts = list(range(rng.start, rng.stop, 40_000))
            random.Random(7).shuffle(starts)
            outcome = []
            for start in starts:
                buf = bytearray(min(40_000 + 5, rng.stop - start))  # pieces overlap a little
                try:
                    r.readinto(start, [memoryview(buf)])
                    outcome.append("read")
                except ChecksumError:
                    outcome.append("refused")
            assert outcome == ["read"] * (len(starts) - damaged) + ["refused"] * damaged
            if damaged:
                with pytest.raises(ChecksumError):
                    r.read_slice("w", slice(0, 10))
            else:
                assert r.read_slice("w", slice(0, 3)).tolist() == [0.0, 1.0, 2.0]
    with tensorfile.open(bad) as r:  # a slice of a member not read whole: not checked
        assert r.read_slice("w", slice(99, 101)).tolist()[1] != 100.0


def test_verify_counts_the_crcs_as_digests(tmp_path: Path, capsys: Any) -> None:
    np.savez(tmp_path / "s.npz", w=np.arange(_BIG, dtype=np.float32), e=np.zeros(0))
    np.savez_compressed(tmp_path / "c.npz", w=np.arange(1000, dtype=np.float32))
    for name in ("s.npz", "c.npz"):
        report = verify(str(tmp_path / name))
        assert report.ok and report.digests_checked == 1 and report.uncovered == ()
    got = run(capsys, "verify", tmp_path / "s.npz")
    assert got.code == 0
    assert got.out.strip() == (
        f"{tmp_path / 's.npz'}: OK (npz, 2 tensors: structure and every byte read, 1 digest "
        "compared (the zip's CRC-32s))"
    )


def test_a_deflated_member_whose_crc_fails_is_a_digest_failure(tmp_path: Path) -> None:
    """The archive's CRC-32 of a deflated member changed (its bytes inflate fine): zipfile's
    check is the same NpzChecksumError, verify's rule ``digest``."""
    path = tmp_path / "c.npz"
    np.savez_compressed(path, w=np.arange(1000, dtype=np.float32))
    data = bytearray(path.read_bytes())
    central = data.index(b"PK\x01\x02")
    data[central + 16] ^= 0xFF  # the CRC-32 the central directory records
    path.write_bytes(bytes(data))
    with tensorfile.open(path) as r, pytest.raises(NpzChecksumError, match=r"w\.npy"):
        r.get_tensor("w")
    assert [(f.subject, f.rule) for f in verify(str(path)).failures] == [("w", "digest")]


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_crc32_combine_is_zlibs(a: bytes, b: bytes) -> None:
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_bytes_read_over_a_gap_check_nothing(tmp_path: Path) -> None:
    """Over HTTP the planner reads ``a`` and ``c`` in one request, the small member ``b``
    between them going to its shared scratch buffer (which parallel pieces may overwrite):
    those bytes never count for ``b``'s CRC-32, so a damaged ``b`` that was not asked for
    fails no read of the others (and its own read still fails)."""
    from tests.helpers.servers import start_range_server

    root = tmp_path / "www"
    root.mkdir()
    path = root / "m.npz"
    big = np.ones(100_000, np.float32)  # b (80 KB) more than zipfile reads for a header
    np.savez(path, a=big, b=np.arange(20_000, dtype=np.float32), c=big)
    data = bytearray(path.read_bytes())
    at = data.index(np.float32(100.0).tobytes())
    data[at] ^= 1  # inside b
    path.write_bytes(bytes(data))
    server, stopper = start_range_server(root, tmp_path / "access.log")
    try:
        with tensorfile.open(f"{server.url}/m.npz") as r:
            got = r.get_tensors(["a", "c"])
            assert got["a"].sum() == got["c"].sum() == 100_000
            with pytest.raises(NpzChecksumError, match=r"member b\.npy"):
                r.get_tensor("b")
    finally:
        stopper.terminate()
