"""``s3://`` through tensorfile's own S3 client, against a real S3 server on 127.0.0.1
(SeaweedFS: the ``seaweed`` fixture of conftest.py, which accepts one key pair): loads equal
the reference library's on the same file, single and sharded; every failure a SourceError
that names the URL and never a secret."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

import tensorfile
import tensorfile.safetensors.numpy
import tensorfile.safetensors.torch as tf_torch
from tensorfile.errors import InvalidArgumentError, SourceError, SourceNotFoundError
from tensorfile.sources import open_path
from tensorfile.sources.s3.s3_source import S3Source, open_s3
from tensorfile.sources.stores.fsspec_source import FsspecSource


def _model(seed: int, n: int = 6, numel: int = 300_000) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"layers.{i}.weight": rng.standard_normal(numel, dtype=np.float32) for i in range(n)}


def _upload(
    server: Any, tmp_path: Path, arrays: dict[str, np.ndarray], key: str
) -> tuple[str, Path]:
    bucket = server.place()
    local = tmp_path / Path(key).name
    safetensors.numpy.save_file(arrays, str(local))  # written by the reference
    server.put(bucket, key, local)
    return f"s3://{bucket}/{key}", local


def test_load_file_from_s3_equals_the_reference(
    s3_env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENSORFILE_IO_CHUNK_MIB", "1")  # 7 MB: many pieces, many requests
    url, local = _upload(s3_env, tmp_path, _model(0), "dir/model v1.safetensors")
    want = safetensors.torch.load_file(str(local))
    got = tf_torch.load_file(url, backend="pread")
    assert sorted(got) == sorted(want)
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_a_sharded_checkpoint_loads_from_s3(s3_env: Any, tmp_path: Path) -> None:
    bucket = s3_env.place()
    weight_map: dict[str, str] = {}
    want: dict[str, np.ndarray] = {}
    for k in range(3):
        part = {f"l{k}.{name}": a for name, a in _model(k, n=3, numel=50_000).items()}
        name = f"model-0000{k + 1}-of-00003.safetensors"
        safetensors.numpy.save_file(part, str(tmp_path / name))
        s3_env.put(bucket, f"ckpt/{name}", tmp_path / name)
        weight_map |= dict.fromkeys(part, name)
        want |= part
    index = {"metadata": {"total_size": sum(a.nbytes for a in want.values())},
             "weight_map": weight_map}  # fmt: skip
    s3_env.put(bucket, "ckpt/model.safetensors.index.json", json.dumps(index).encode())
    with tensorfile.open(f"s3://{bucket}/ckpt/model.safetensors.index.json") as ck:
        got = ck.get_tensors(sorted(want))
    assert sorted(got) == sorted(want)
    assert all(np.array_equal(got[k], want[k]) for k in want)


def test_storage_options_reach_the_server_and_threads_share_a_source(
    seaweed: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    data = os.urandom(5 << 20)
    bucket = seaweed.place()
    seaweed.put(bucket, "raw.bin", data)
    with open_path(f"s3://{bucket}/raw.bin", **seaweed.options, io_chunk=256 << 10) as src:
        assert isinstance(src, S3Source) and src.io_chunk == 256 << 10
        assert src.version == seaweed.etag(bucket, "raw.bin")
        buf = bytearray(len(data))
        view = memoryview(buf)
        offsets = range(0, len(data), src.io_chunk)

        def piece(at: int) -> None:
            src.readinto(at, [view[at : at + src.io_chunk]])

        with ThreadPoolExecutor(src.io_threads) as pool:
            list(pool.map(piece, offsets))
        assert bytes(buf) == data
        assert src.read(12345, 100) == data[12345:12445]


def test_an_object_replaced_mid_load_is_an_error(s3_env: Any) -> None:
    bucket = s3_env.place()
    data = os.urandom(1 << 20)
    s3_env.put(bucket, "m.bin", data)
    for replacement in (os.urandom(1 << 20), os.urandom(2 << 20)):  # same size, another size
        with open_path(f"s3://{bucket}/m.bin") as src:
            assert src.read(0, 10) == data[:10]  # the first reply: size and ETag learnt
            s3_env.put(bucket, "m.bin", replacement)
            with pytest.raises(SourceError, match="changed"):
                src.readinto(500_000, [memoryview(bytearray(100_000))])
        s3_env.put(bucket, "m.bin", data)


def test_wrong_credentials_are_a_clear_error_without_the_secret(
    s3_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3_env.place()
    s3_env.put(bucket, "m.bin", b"x" * 1000)
    url = f"s3://{bucket}/m.bin"
    cases = {
        "InvalidAccessKeyId": ("AKIA-nobody", "not-the-secret-1234"),
        "SignatureDoesNotMatch": (s3_env.key, "not-the-secret-1234"),
    }
    for code, (key, secret) in cases.items():
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
        with pytest.raises(SourceError, match=f"HTTP 403 .*{code}") as info:
            open_path(url)
        assert not isinstance(info.value, SourceNotFoundError)
        assert url in str(info.value) and "not-the-secret" not in str(info.value)


def test_no_credentials_say_so(
    s3_env: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bucket = s3_env.place()
    s3_env.put(bucket, "m.bin", b"x" * 1000)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(SourceError, match="no AWS credentials were found"):
        open_path(f"s3://{bucket}/m.bin")


def test_credentials_from_the_shared_file(
    s3_env: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bucket = s3_env.place()
    s3_env.put(bucket, "m.bin", b"y" * 1000)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    creds = tmp_path / "credentials"
    creds.write_text(
        f"[default]\naws_access_key_id = nobody\naws_secret_access_key = nothing\n\n"
        f"[tf]\naws_access_key_id = {s3_env.key}\naws_secret_access_key = {s3_env.secret}\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_PROFILE", "tf")
    with open_path(f"s3://{bucket}/m.bin") as src:
        assert src.read(0, 3) == b"yyy"


def test_a_missing_object_or_bucket_is_not_found(s3_env: Any) -> None:
    bucket = s3_env.place()
    for url in (f"s3://{bucket}/none.safetensors", "s3://tf-no-such-bucket-x/m.safetensors"):
        with pytest.raises(SourceNotFoundError, match="NoSuch") as info:
            tensorfile.open(url)
        assert url in str(info.value)


def test_options_beyond_the_client_go_to_fsspec(
    s3_env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, local = _upload(s3_env, tmp_path, _model(1, n=2, numel=1000), "m.safetensors")
    options = {**s3_env.options, "version_aware": False}
    with open_s3(url, **options) as src:
        assert isinstance(src, FsspecSource)
        assert src.read(0, 100) == local.read_bytes()[:100]
    monkeypatch.setenv("TENSORFILE_S3", "fsspec")
    with open_s3(url, **s3_env.options) as src:
        assert isinstance(src, FsspecSource)
    with pytest.raises(InvalidArgumentError, match="timeout"):
        open_s3(url, **s3_env.options, timeout=3)  # tensorfile's option, for its own client


def test_fsspec_loads_in_concurrent_pieces_too(
    s3_env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback (s3fs here) is read by the planner as well: pieces, threads, equal."""
    monkeypatch.setenv("TENSORFILE_S3", "fsspec")
    monkeypatch.setenv("TENSORFILE_IO_CHUNK_MIB", "1")
    url, local = _upload(s3_env, tmp_path, _model(3), "fsspec.safetensors")
    with tensorfile.open(url) as f:
        assert isinstance(f.source, FsspecSource) and f.source.io_threads > 1
        got = f.get_tensors(f.keys())
        assert f.source.stats.requests >= 1 + 6  # 7 MB in 1 MiB pieces
    want = safetensors.numpy.load_file(str(local))
    assert all(np.array_equal(got[k], want[k]) for k in want)


def test_a_killed_load_leaves_the_server_serving(s3_env: Any, tmp_path: Path) -> None:
    """SIGKILL in the middle of a load: the next process loads the same object."""
    url, local = _upload(s3_env, tmp_path, _model(2, n=8, numel=1 << 20), "big.safetensors")
    script = textwrap.dedent(
        """
        import sys, tensorfile.safetensors.numpy as t
        print("loading", flush=True)
        t.load_file(sys.argv[1])
        print("done", flush=True)
        """
    )
    env = {**os.environ, "TENSORFILE_IO_CHUNK_MIB": "1", "TENSORFILE_IO_THREADS": "2"}
    proc = subprocess.Popen([sys.executable, "-c", script, url], stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stdout.readline() == b"loading\n"
    time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    want = safetensors.numpy.load_file(str(local))
    got = tensorfile.safetensors.numpy.load_file(url)
    assert all(np.array_equal(got[k], want[k]) for k in want)
