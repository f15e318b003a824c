"""One whole-process remote load, run by ``benchmarks.remote_load`` in a fresh interpreter.

Usage: ``python benchmarks/_remote_child.py LOADER URL [URL ...] [--index URL] [--check]``

Loaders (each imports only what it needs, then loads every tensor as a torch CPU tensor):

* ``tf``: ``tensorfile.safetensors.torch.load_file(url, backend="pread")``, or for a sharded
  checkpoint (``--index``) ``tensorfile.safetensors.torch.load_sharded(index)`` (all shards
  in one plan);
* ``runai``: the Run:ai streamer's ``SafetensorsStreamer().stream_files(urls)`` (owned
  tensors; its S3 backend reads the ``AWS_*`` environment);
* ``boto3``: ``get_object(...)["Body"].read()`` then ``safetensors.torch.load`` per file;
* ``s3fs``: ``S3FileSystem().cat_file(path)`` then ``safetensors.torch.load`` per file;
* ``urllib``: ``urllib.request.urlopen(url).read()`` then ``safetensors.torch.load`` per
  file (one plain GET each).

Prints one JSON line: import and load times measured here, the RSS once imported (the
interpreter and its libraries: what a load adds is the peak minus it), the peak RSS
(``VmHWM``), the tensor bytes and count, and with ``--check`` a CRC-32 of every tensor.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _bucket_key(url: str) -> tuple[str, str]:
    bucket, _, key = url.removeprefix("s3://").partition("/")
    return bucket, key


def _loader(name: str) -> Any:
    """``load(urls, index) -> dict of tensors`` for ``name``, its imports done."""
    if name == "tf":
        import tensorfile.safetensors.torch as tft

        def tf(urls: list[str], index: str | None) -> dict[str, Any]:
            if index is not None:
                return tft.load_sharded(index)
            return tft.load_file(urls[0], backend="pread")

        return tf
    if name == "runai":
        from runai_model_streamer import SafetensorsStreamer

        def runai(urls: list[str], index: str | None) -> dict[str, Any]:
            with SafetensorsStreamer() as streamer:
                streamer.stream_files(urls)
                return dict(streamer.get_tensors())

        return runai
    import safetensors.torch

    fetch: Any
    if name == "boto3":
        import boto3

        client = boto3.client("s3")

        def fetch(url: str) -> bytes:
            bucket, key = _bucket_key(url)
            data: bytes = client.get_object(Bucket=bucket, Key=key)["Body"].read()
            return data

    elif name == "s3fs":
        import s3fs

        fs = s3fs.S3FileSystem()

        def fetch(url: str) -> bytes:
            data: bytes = fs.cat_file(url.removeprefix("s3://"))
            return data

    elif name == "urllib":
        import urllib.request

        def fetch(url: str) -> bytes:
            with urllib.request.urlopen(url) as reply:
                data: bytes = reply.read()
                return data

    else:
        raise SystemExit(f"unknown loader {name!r}")

    def whole(urls: list[str], index: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for url in urls:
            data = fetch(url)
            out |= safetensors.torch.load(data)
            del data
        return out

    return whole


def main(argv: list[str]) -> int:
    t0 = time.perf_counter()
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    index = None
    if "--index" in args:
        i = args.index("--index")
        index = args[i + 1]
        del args[i : i + 2]
    name, urls = args[0], args[1:]
    load = _loader(name)
    t1 = time.perf_counter()
    base = _status("VmRSS")
    tensors = load(urls, index)
    t2 = time.perf_counter()
    out: dict[str, Any] = {
        "import_s": t1 - t0,
        "load_s": t2 - t1,
        "base_rss_kib": base,
        "peak_rss_kib": _status("VmHWM"),
        "nbytes": sum(t.numel() * t.element_size() for t in tensors.values()),
        "tensors": len(tensors),
    }
    if check:
        import zlib

        import torch

        out["crc32"] = {
            k: zlib.crc32(t.contiguous().view(-1).view(torch.uint8).numpy())
            for k, t in tensors.items()
        }
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
