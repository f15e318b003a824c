"""Issue 35, finding f04: a content id built from ``crc32c`` (or ``xxh3``) digests can be
forged, and now says what it is.

A file with a weight changed from 1.0 to -1000.0, and the lowest mantissa bits of a few
other weights flipped so that the tensor keeps its CRC-32C (CRC is linear over GF(2)), got
the genuine file's ``id --content --digest crc32c``: 64 hex digits that looked as strong as
a ``sha256`` id, while the CLI guide said "no two different files share an id". The
behaviour is kept (a checksum id is cheap and catches accidents), but such an id names its
algorithm (``crc32c:<hex>``, ``xxh3:<hex>``), so it is never taken for a ``sha256`` one,
and the help, the CLI guide and the security page say that only ``sha256`` ids resist a
forger.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from tensorfile.core.digests import Digest
from tensorfile.ops import content_hash
from tensorfile.safetensors.numpy import save_file
from tests.helpers.cli import run
from tests.helpers.venvs import ROOT as REPO

SHA256_ID = re.compile(r"[0-9a-f]{64}")


def _crc(data: bytes) -> int:
    d = Digest("crc32c")
    d.update(data)
    return int(d.value().partition(":")[2], 16)


def _forged(genuine: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``genuine`` with element 0 set to -1000 and bit 0 or 1 of the first mantissa byte
    of some of elements 1..63 flipped, chosen (Gaussian elimination over GF(2)) so that its
    CRC-32C is the genuine one's."""
    g = genuine.tobytes()
    zero = _crc(bytes(len(g)))

    def linear(delta: bytes) -> int:  # crc(x ^ delta) == crc(x) ^ linear(delta)
        return _crc(delta) ^ zero

    forged = genuine.copy()
    forged[0] = -1000.0
    target = linear(bytes(a ^ b for a, b in zip(g, forged.tobytes(), strict=True)))
    flips = [(4 * i, 1 << bit) for i in range(1, 64) for bit in (0, 1)]
    basis: list[tuple[int, int]] = []  # (linear part, the set of flips giving it)
    for k, (at, bit) in enumerate(flips):
        delta = bytearray(len(g))
        delta[at] = bit
        v, used = linear(bytes(delta)), 1 << k
        for bv, bu in basis:
            if v ^ bv < v:
                v, used = v ^ bv, used ^ bu
        if v:
            basis.append((v, used))
            basis.sort(reverse=True)
    v, used = target, 0
    for bv, bu in basis:
        if v ^ bv < v:
            v, used = v ^ bv, used ^ bu
    assert v == 0
    raw = bytearray(forged.tobytes())
    for k, (at, bit) in enumerate(flips):
        if used >> k & 1:
            raw[at] ^= bit
    out = np.frombuffer(bytes(raw), np.float32)
    assert _crc(bytes(raw)) == _crc(g)
    return out


def test_a_crc32c_id_can_be_forged_and_names_its_algorithm(tmp_path: Path, capsys: Any) -> None:
    genuine = np.linspace(1.0, 2.0, 256, dtype=np.float32)
    forged = _forged(genuine)
    assert forged[0] == -1000.0 and float(np.abs(forged[1:] - genuine[1:]).max()) < 1e-6
    a, b = tmp_path / "genuine.safetensors", tmp_path / "forged.safetensors"
    save_file({"w": genuine}, str(a))
    save_file({"w": forged}, str(b))
    # the sha256 id (the default, bare hex) tells them apart; the crc32c one cannot...
    assert content_hash(str(a)) != content_hash(str(b))
    weak = content_hash(str(a), algorithm="crc32c")
    assert weak == content_hash(str(b), algorithm="crc32c")
    # ...and says so: it names its algorithm, never passing for a sha256 id
    assert weak.startswith("crc32c:") and SHA256_ID.fullmatch(weak.removeprefix("crc32c:"))
    assert SHA256_ID.fullmatch(content_hash(str(a)))
    for alg in ("crc32c", "xxh3"):
        r = run(capsys, "id", "--content", "--digest", alg, a)
        assert r.code == 0 and re.fullmatch(f"{alg}:[0-9a-f]{{64}}\n", r.out), r
    r = run(capsys, "id", "--content", "--digest", "sha256", a)
    assert (r.code, r.out) == (0, content_hash(str(a)) + "\n")


def test_the_help_and_the_docs_say_only_sha256_ids_resist_a_forger(capsys: Any) -> None:
    r = run(capsys, "id", "--help")
    assert r.code == 0
    said = " ".join(r.out.split())
    assert "Only a sha256 id resists a forger" in said
    assert "Only the default sha256 id resists a forger" in said
    assert "xxh3:<hex> and crc32c:<hex>" in said
    cli = " ".join((REPO / "docs/guides/cli.md").read_text().split())
    assert 'Only a `sha256` id resists a forger"' in cli
    assert "no two different files share an id" not in cli
    security = " ".join((REPO / "docs/guides/security.md").read_text().split())
    assert "Only a `sha256` id (the default, 64 hex digits) resists a forger" in security
