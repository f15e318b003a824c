"""Issue 24, item 7: ``verify`` groups a rule that fails for many tensors into one line.

What the user did: ``tensorfile verify`` on a model cut short (a download stopped early),
which printed 89 identical lines, one per tensor past the cut. A rule failing for more than
three subjects is now one line (how many, the first and the last in file order) and the
first one's message; one, two or three failures print as before; ``--json`` still lists
every failure, with the groups beside.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.numpy as ref_st

from tensorfile import ztensor
from tensorfile.ops import verify
from tests.helpers.cli import run, strict_json

NDArray = np.ndarray[Any, Any]


def _failed_json(capsys: Any, *argv: Any) -> Any:
    """``verify --json`` of a file that fails: status 1, one strict JSON document."""
    r = run(capsys, "verify", *argv, "--json")
    assert r.code == 1, r
    return strict_json(r.out)


def _model(n: int = 100) -> dict[str, NDArray]:
    return {f"layers.{i}.w": np.full(64, i, np.float32) for i in range(n)}


def _file_order(path: Path) -> list[str]:
    """The tensors of a safetensors file by data offset, from its JSON header."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__", None)
    return sorted(header, key=lambda k: header[k]["data_offsets"][0])


def _cut(path: Path, past_end: int) -> list[str]:
    """Cut the file so that exactly ``past_end`` tensors run past its end (the first of
    them by 10 bytes); those tensors, in file order."""
    order = _file_order(path)
    raw = path.read_bytes()
    keep = len(raw) - past_end * 256 + 10  # every tensor is 64 x 4 bytes, stored last-first
    path.write_bytes(raw[:keep])
    return order[len(order) - past_end :]


def _mixed() -> dict[str, NDArray]:
    """100 tensors of 256 bytes each that the reference writer stores in another order
    than its header lists them (F32 before F16, each by name; the header by name)."""
    out = {f"z.{i}": np.full(64, i, np.float32) for i in range(50)}
    out.update({f"a.{i}": np.full(128, i, np.float16) for i in range(50)})
    return out


def _keys_sorted(path: Path) -> None:
    """Rewrite the header with its keys sorted (as a writer using ``sort_keys`` does): the
    same file, whose header no longer lists the tensors in file order."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.dumps(json.loads(raw[8 : 8 + n]), sort_keys=True).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header + raw[8 + n :])


def test_a_truncated_download_is_one_line(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "model.safetensors"
    ref_st.save_file(_mixed(), str(path))  # the reference writer's order, not ours
    _keys_sorted(path)
    assert ref_st.load_file(str(path)).keys() == _mixed().keys()  # still a valid file
    raw = path.read_bytes()
    listed = list(json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")]))
    assert listed != _file_order(path)  # first and last must be by offset, not header
    cut = _cut(path, 89)
    r = run(capsys, "verify", path)
    assert r.code == 1
    lines = r.out.splitlines()
    assert lines[0] == f"{path}: FAILED (safetensors, 89 failures, 0 tensors read)"
    assert lines[1] == (
        f"  truncated: 89 tensors lie past the end of the file (first: {cut[0]}, last: {cut[-1]})"
    )
    assert lines[2].startswith(f"    {cut[0]}: {path}: tensor data ends at byte ")
    assert lines[3:] == ["  (--json lists every failure)"]
    # stderr: the first failing tensor, as before
    assert r.err.strip().startswith(f"tensorfile: error: {path}: {cut[0]} fails rule truncated")
    doc = _failed_json(capsys, path)
    assert [f["subject"] for f in doc["failures"]] == cut  # all of them, in file order
    assert {f["rule"] for f in doc["failures"]} == {"truncated"}
    summary = f"89 tensors lie past the end of the file (first: {cut[0]}, last: {cut[-1]})"
    assert doc["groups"] == [
        {
            "rule": "truncated",
            "count": 89,
            "summary": summary,
            "first": cut[0],
            "last": cut[-1],
        }
    ]


def test_three_failures_or_fewer_are_listed_one_by_one(tmp_path: Path, capsys: Any) -> None:
    for past_end, grouped in ((1, False), (3, False), (4, True)):
        path = tmp_path / f"cut{past_end}.safetensors"
        ref_st.save_file(_model(10), str(path))
        cut = _cut(path, past_end)
        r = run(capsys, "verify", path)
        assert r.code == 1
        lines = r.out.splitlines()[1:]
        report = verify(path)
        if grouped:
            assert len(lines) == 3, lines
            assert lines[0].startswith(f"  truncated: {past_end} tensors lie past the end")
        else:  # unchanged: one line per failure, subject, rule and message
            assert lines == [f"  {f.subject}: truncated: {f.message}" for f in report.failures]
            assert [f.subject for f in report.failures] == cut
            assert _failed_json(capsys, path)["groups"] == []


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


def test_every_repeating_rule_is_grouped(tmp_path: Path, capsys: Any) -> None:
    """Digest failures (5 tensors changed in a checksummed zTensor) and NaN values (4
    tensors, --deep) are grouped; one tensor with infinities is listed alone."""
    tensors = {f"t.{i}": np.arange(64, dtype=np.float32) for i in range(12)}
    for i in (6, 7, 8, 9):
        tensors[f"t.{i}"][3] = np.nan
    tensors["t.10"][0] = np.inf
    path = tmp_path / "m.zt"
    ztensor.save_file(tensors, str(path), checksum="crc32c")
    with ztensor.open(str(path)) as f:
        starts = {n: f.info(n).data.range.start for n in tensors}
    changed = ["t.0", "t.1", "t.2", "t.3", "t.4"]
    for name in changed:
        _flip(path, starts[name] + 9)
    r = run(capsys, "verify", path, "--deep")
    assert r.code == 1
    lines = r.out.splitlines()
    assert lines[0] == f"{path}: FAILED (ztensor, 10 failures, 7 tensors read)"
    assert lines[1] == (
        "  digest: 5 tensors do not match the digests the file stores (first: t.0, last: t.4)"
    )
    assert lines[2].startswith("    t.0: ") and "crc32c" in lines[2]
    assert lines[3] == "  nan: 4 tensors hold NaN values (first: t.6, last: t.9)"
    assert lines[4] == "    t.6: 1 of 64 values are NaN"
    assert lines[5] == "  t.10: inf: 1 of 64 values are infinite"
    assert lines[6:] == ["  (--json lists every failure)"]
    doc = _failed_json(capsys, path, "--deep")
    assert [(f["subject"], f["rule"]) for f in doc["failures"]] == [
        *((n, "digest") for n in changed),
        *((f"t.{i}", "nan") for i in (6, 7, 8, 9)),
        ("t.10", "inf"),
    ]
    assert [(g["rule"], g["count"]) for g in doc["groups"]] == [("digest", 5), ("nan", 4)]


def test_a_checkpoint_missing_many_shards_is_one_line(tmp_path: Path, capsys: Any) -> None:
    """An index naming six shards, five of them missing (a partial download)."""
    names = [f"model-0000{i}-of-00006.safetensors" for i in range(1, 7)]
    weight_map = {f"layers.{i}.w": names[i] for i in range(6)}
    ref_st.save_file({"layers.0.w": np.ones(4, np.float32)}, str(tmp_path / names[0]))
    index = {"metadata": {}, "weight_map": weight_map}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    r = run(capsys, "verify", tmp_path)
    assert r.code == 1
    lines = r.out.splitlines()
    assert (
        lines[1] == f"  missing-shard: 5 shards are missing (first: {names[1]}, last: {names[5]})"
    )
    assert lines[2] == (
        f"    {names[1]}: shard {names[1]} is missing; the index places 1 tensor in it (layers.1.w)"
    )
    doc = _failed_json(capsys, tmp_path)
    assert [f["subject"] for f in doc["failures"]] == names[1:]
