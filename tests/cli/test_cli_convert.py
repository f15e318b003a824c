"""`tensorfile convert SRC DST`: the command line around tensorfile.convert. The table and
--json, exit codes (0 converted, 2 usage or an unreadable/unconvertible source, nothing left
at DST), --densify, every zTensor option read back by ztensor 1.0.1 and 2.1.2, the progress
bar on a terminal, SIGKILL with no earlier DST, and the hostile sources the sources module
meets (lying .npz members, big-endian arrays, colliding pickle names)."""

from __future__ import annotations

import io
import json
import os
import pty
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy
import torch
import ztensor as zt1

from tensorfile import TensorFileError, UnsupportedError, ztensor
from tensorfile.ops import content_hash, convert
from tensorfile.safetensors.numpy import load_file, save_file
from tests.ztensor import zt2

CLI = [sys.executable, "-m", "tensorfile.cli.app"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)


def _model(path: Path) -> dict[str, np.ndarray]:  # type: ignore[type-arg]
    rng = np.random.default_rng(7)
    tensors = {
        "emb": rng.standard_normal((16, 8)).astype(np.float32),
        "ids": np.arange(10, dtype=np.int64),
        "half": rng.standard_normal(5).astype(np.float16),
    }
    save_file(tensors, str(path), metadata={"format": "pt", "note": "ü"})
    return tensors


def _ids(*paths: Path) -> list[str]:
    run = _cli("id", "--content", "--json", *map(str, paths))
    assert run.returncode == 0, run.stderr
    rows = json.loads(run.stdout)
    return [str(r["content_hash"]) for r in (rows if isinstance(rows, list) else [rows])]


def test_json_output_describes_the_conversion_and_the_content_id_is_kept(tmp_path: Path) -> None:
    src = tmp_path / "m.safetensors"
    _model(src)
    run = _cli("convert", str(src), str(tmp_path / "m.zt"), "--to", "zt2", "--json")
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["schema"] == "tensorfile.convert/1"
    assert doc["source_format"] == "safetensors" and doc["destination_format"] == "zt2"
    assert doc["tensors"] == 3 and doc["files"] == [str(tmp_path / "m.zt")]
    assert doc["bytes_in"] == 16 * 8 * 4 + 10 * 8 + 5 * 2
    assert doc["bytes_out"] == (tmp_path / "m.zt").stat().st_size
    assert doc["densified"] == [] and doc["notes"] == []
    a, b = _ids(src, tmp_path / "m.zt")
    assert a == b == content_hash(str(src))


def test_table_output_names_both_formats(tmp_path: Path) -> None:
    src = tmp_path / "m.safetensors"
    _model(src)
    run = _cli("convert", str(src), str(tmp_path / "m.npz"))
    assert run.returncode == 0, run.stderr
    assert "(safetensors)" in run.stdout and "(npz)" in run.stdout and "3 tensors" in run.stdout
    with np.load(tmp_path / "m.npz") as z:
        assert sorted(z.files) == ["emb", "half", "ids"]


@pytest.mark.parametrize(
    ("dst", "extra", "message"),
    [
        ("out.weights", [], "cannot tell the output format"),
        ("m.safetensors", [], "same file"),
        ("out.npz", ["--level", "3"], "level does not apply to npz"),
        ("out.safetensors", ["--align", "4096"], "align does not apply"),  # checksum applies
        ("out.zt", ["--to", "zt2", "--align", "0"], "align"),
    ],
)
def test_usage_errors_exit_2_and_leave_nothing(
    tmp_path: Path, dst: str, extra: list[str], message: str
) -> None:
    src = tmp_path / "m.safetensors"
    _model(src)
    before = src.read_bytes()
    run = _cli("convert", str(src), str(tmp_path / dst), *extra)
    assert run.returncode == 2, run.stdout
    assert message in run.stderr and "Traceback" not in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]
    assert src.read_bytes() == before


def test_a_missing_source_exits_2(tmp_path: Path) -> None:
    run = _cli("convert", str(tmp_path / "nope.safetensors"), str(tmp_path / "o.zt"))
    assert run.returncode == 2 and "nope.safetensors" in run.stderr
    assert not (tmp_path / "o.zt").exists()


def test_densify_on_the_command_line(tmp_path: Path) -> None:
    dense = np.arange(12, dtype=np.float32).reshape(3, 4) * (np.arange(4) % 2)
    ztensor.save_file(
        {"s": ztensor.COOTensor.from_dense(dense), "d": np.ones(2, np.int8)}, tmp_path / "s.zt"
    )
    run = _cli("convert", str(tmp_path / "s.zt"), str(tmp_path / "s.npz"))
    assert run.returncode == 2 and "'s'" in run.stderr and "--densify" in run.stderr
    assert not (tmp_path / "s.npz").exists()
    run = _cli("convert", str(tmp_path / "s.zt"), str(tmp_path / "s.npz"), "--densify", "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["densified"] == ["s"]
    with np.load(tmp_path / "s.npz") as z:
        assert np.array_equal(z["s"], dense) and z["d"].tolist() == [1, 1]


def test_zt_v1_options_are_read_back_by_ztensor_1_0_1(tmp_path: Path) -> None:
    src = tmp_path / "m.safetensors"
    tensors = _model(src)
    args = ["--compression", "zstd", "--level", "5", "--checksum", "crc32c"]
    run = _cli("convert", str(src), str(tmp_path / "m.zt"), *args)
    assert run.returncode == 0, run.stderr
    reader = zt1.Reader(str(tmp_path / "m.zt"))
    for name, value in tensors.items():
        assert np.array_equal(reader.read_tensor(name), value)
    with ztensor.open(tmp_path / "m.zt") as f:
        assert f.metadata["note"] == "ü"


def test_zt2_options_are_read_back_by_ztensor_2_1_2(tmp_path: Path) -> None:
    src = tmp_path / "m.safetensors"
    tensors = _model(src)
    args = ["--to", "zt2", "--compression", "zstd", "--checksum", "xxh3", "--align", "4096"]
    run = _cli("convert", str(src), str(tmp_path / "m.zt"), *args)
    assert run.returncode == 0, run.stderr
    peer = zt2.read(tmp_path / "m.zt")
    for name, value in tensors.items():
        part = peer["objects"][name]["parts"]["data"]
        assert part["bytes"].tobytes() == value.tobytes()
        assert part["verified"]
    assert peer["attributes"]["note"] == "ü"
    # and back to safetensors, which the safetensors package reads with its metadata
    run = _cli("convert", str(tmp_path / "m.zt"), str(tmp_path / "back.safetensors"))
    assert run.returncode == 0, run.stderr
    back = safetensors.numpy.load_file(str(tmp_path / "back.safetensors"))
    assert all(np.array_equal(back[k], v) for k, v in tensors.items())
    with safetensors.safe_open(str(tmp_path / "back.safetensors"), "np") as f:
        assert f.metadata() == {"format": "pt", "note": "ü"}


def test_a_progress_bar_is_drawn_on_a_terminal_and_stdout_stays_clean(tmp_path: Path) -> None:
    src = tmp_path / "big.safetensors"
    save_file({f"t{i}": np.full(1 << 20, i, np.float32) for i in range(17)}, str(src))  # 68 MiB
    dst = tmp_path / "big.zt"
    primary, secondary = pty.openpty()
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "100"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [*CLI, "convert", str(src), str(dst), "--json"],
        stdout=subprocess.PIPE,
        stderr=secondary,
        env=env,
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    out, _ = proc.communicate(timeout=300)
    os.close(primary)
    assert proc.returncode == 0
    assert b"converting" in b"".join(chunks)
    assert json.loads(out)["tensors"] == 17
    assert content_hash(str(dst)) == content_hash(str(src))


@pytest.mark.parametrize(("dst", "to"), [("out.safetensors", None), ("out.zt", "zt2")])
def test_sigkill_mid_convert_leaves_no_destination(
    tmp_path: Path, dst: str, to: str | None
) -> None:
    src = tmp_path / "big.safetensors"
    rng = np.random.default_rng(5)  # incompressible: zstd -19 is slow, the kills land mid-write
    save_file({f"t{i}": rng.random(1 << 20, np.float32) for i in range(24)}, str(src))
    zt = tmp_path / "big.zt"
    ztensor.save_file(load_file(str(src)), zt)  # a zt source: the safetensors output is written
    source = zt if dst.endswith(".safetensors") else src
    slow = ["--to", to, "--compression", "zstd", "--level", "19"] if to else []
    killed = 0
    for delay in (0.2, 0.6, 1.2):
        proc = subprocess.Popen(
            [*CLI, "convert", str(source), str(tmp_path / dst), *slow],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed += proc.returncode == -signal.SIGKILL
        # killed before the rename: nothing; after it (the interpreter exiting): the whole file
        if (tmp_path / dst).exists():
            assert content_hash(str(tmp_path / dst)) == content_hash(str(src))
            (tmp_path / dst).unlink()
        assert all(
            p.name in {"big.safetensors", "big.zt"} or ".tmp" in p.name or p.name.startswith(".")
            for p in tmp_path.iterdir()
        )
    assert killed
    run = _cli("convert", str(source), str(tmp_path / dst), *(["--to", to] if to else []))
    assert run.returncode == 0, run.stderr
    assert content_hash(str(tmp_path / dst)) == content_hash(str(src))


def test_big_endian_numpy_arrays_are_stored_little_endian(tmp_path: Path) -> None:
    a = np.arange(5, dtype=">f4")
    b = np.asfortranarray(np.arange(6, dtype=">i2").reshape(2, 3))
    np.savez(tmp_path / "be.npz", a=a, b=b)
    np.save(tmp_path / "c.npy", np.arange(4, dtype=">u4"))
    convert(tmp_path / "be.npz", tmp_path / "be.safetensors")
    got = safetensors.numpy.load_file(str(tmp_path / "be.safetensors"))
    assert got["a"].tolist() == a.tolist() and got["b"].tolist() == b.tolist()
    convert(tmp_path / "c.npy", tmp_path / "c.zt")
    assert zt1.Reader(str(tmp_path / "c.zt")).read_tensor("c").tolist() == [0, 1, 2, 3]


def _npy_bytes(arr: np.ndarray) -> bytes:  # type: ignore[type-arg]
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr)
    return buf.getvalue()


def test_hostile_npz_members(tmp_path: Path) -> None:
    data = _npy_bytes(np.ones(1000, np.float32))
    with zipfile.ZipFile(tmp_path / "short.npz", "w") as zf:  # a member cut short
        zf.writestr("w.npy", data[:300])
    with pytest.raises(TensorFileError, match="claims 4,000 bytes"):
        convert(tmp_path / "short.npz", tmp_path / "o.safetensors")
    with zipfile.ZipFile(tmp_path / "text.npz", "w") as zf:  # not an array
        zf.writestr("w.npy", data)
        zf.writestr("readme.txt", "hello")
    with pytest.raises(UnsupportedError, match=r"readme\.txt is not an \.npy array"):
        convert(tmp_path / "text.npz", tmp_path / "o.safetensors")
    with zipfile.ZipFile(tmp_path / "crc.npz", "w") as zf:
        zf.writestr("w.npy", data)
    raw = bytearray((tmp_path / "crc.npz").read_bytes())
    raw[raw.index(b"\x00\x00\x80\x3f") + 400] ^= 0xFF  # a data byte: the CRC no longer holds
    (tmp_path / "crc.npz").write_bytes(bytes(raw))
    run = _cli("convert", str(tmp_path / "crc.npz"), str(tmp_path / "o.safetensors"))
    assert run.returncode == 2 and "CRC" in run.stderr and "Traceback" not in run.stderr
    np.savez(tmp_path / "str.npz", s=np.array(["abc"]))
    with pytest.raises(UnsupportedError, match="no tensor format holds"):
        convert(tmp_path / "str.npz", tmp_path / "o.safetensors")
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(TensorFileError):
        convert(tmp_path / "junk.npz", tmp_path / "o.safetensors")
    assert not (tmp_path / "o.safetensors").exists()


def test_pickle_shapes_convert_names_and_refuse_collisions(tmp_path: Path) -> None:
    torch.save(torch.arange(3), tmp_path / "lone.pt")  # a lone tensor: named after the file
    convert(tmp_path / "lone.pt", tmp_path / "lone.safetensors")
    assert load_file(str(tmp_path / "lone.safetensors"))["lone"].tolist() == [0, 1, 2]
    torch.save({"a.b": torch.ones(2), "a": {"b": torch.zeros(2)}}, tmp_path / "dup.pt")
    with pytest.raises(UnsupportedError, match=r"'a\.b'"):
        convert(tmp_path / "dup.pt", tmp_path / "dup.safetensors")
    assert not (tmp_path / "dup.safetensors").exists()
    # a value that is not a tensor is kept as metadata, and the notes say so
    torch.save({"w": torch.ones(2), "opt": {"step": 3}}, tmp_path / "step.pt")
    run = _cli("convert", str(tmp_path / "step.pt"), str(tmp_path / "step.safetensors"))
    assert run.returncode == 0, run.stderr
    assert "note: not tensors, kept as metadata, as JSON text: opt (dict of 1 int)" in run.stdout
    with safetensors.safe_open(str(tmp_path / "step.safetensors"), "np") as f:
        assert f.metadata() == {"opt": '{"step": 3}'} and list(f.keys()) == ["w"]


def test_bf16_to_npz_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    src = tmp_path / "m.safetensors"
    save_file({"w": np.ones(2, np.float32), "h": np.ones(2, ml_dtypes.bfloat16)}, str(src))
    run = _cli("convert", str(src), str(tmp_path / "m.npz"))
    assert run.returncode == 2 and "'h' is BF16" in run.stderr
    assert not (tmp_path / "m.npz").exists()
