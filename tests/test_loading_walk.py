"""A local load opens its file once and decides how to read it once.

``load_file`` (numpy and torch faces, every backend, warm and cold) and ``safe_open`` are
run in a fresh interpreter that counts, with an audit hook (``sys.addaudithook``: the
``open`` event of ``open()`` and ``os.open``), the opens of the file, of the mount table
(the read policy's probe) and of ``/proc/self/fd/N`` (the second descriptor ``O_DIRECT``
reads need, opened only when the policy chose them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy as ref

CHILD = r"""
import json, os, sys

path = sys.argv[1]
seen = []


def hook(event, args):
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        seen.append(os.fsdecode(os.fspath(args[0])))


sys.addaudithook(hook)

import tensorfile.safetensors.numpy as tfnp
import tensorfile.safetensors.torch as tft
from tensorfile.loading import last
from tensorfile.safetensors import safe_open


def evict():
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def through_safe_open():
    with safe_open(path, framework="pt") as f:
        f.read_tensors()
        f.get_tensor("a")
        return getattr(f.reader.source, "choice", None)


CASES = {
    "numpy": lambda: tfnp.load_file(path),
    "numpy pread": lambda: tfnp.load_file(path, backend="pread"),
    "numpy views": lambda: tfnp.load_file(path, copy=False),
    "torch": lambda: tft.load_file(path),
    "torch mmap": lambda: tft.load_file(path, backend="mmap"),
    "torch pread": lambda: tft.load_file(path, backend="pread"),
    "torch copies": lambda: tft.load_file(path, copy=True),
    "safe_open": through_safe_open,
}
out = {}
for cold in (False, True):
    for name, load in CASES.items():
        if cold:
            evict()
        seen.clear()
        got = load()
        choice = got if name == "safe_open" else last()
        out[f"{name}{' cold' if cold else ''}"] = {
            "file": seen.count(path),
            "mountinfo": seen.count("/proc/self/mountinfo"),
            "direct_fd": sum(s.startswith("/proc/self/fd/") for s in seen),
            "direct": bool(getattr(choice, "direct", False)),
        }
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def walks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    path = tmp_path_factory.mktemp("walk") / "m.safetensors"
    rng = np.random.default_rng(0)
    tensors = {n: rng.standard_normal(600_000).astype(np.float32) for n in ("a", "b", "c")}
    ref.save_file(tensors, str(path))  # 7 MiB: reads large enough for O_DIRECT
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    found: dict[str, dict[str, Any]] = json.loads(proc.stdout.splitlines()[-1])
    return found


def test_every_local_load_opens_its_file_once(walks: dict[str, dict[str, Any]]) -> None:
    assert len(walks) == 16
    assert {name: w["file"] for name, w in walks.items()} == dict.fromkeys(walks, 1)


def test_the_mount_table_is_read_at_most_once(walks: dict[str, dict[str, Any]]) -> None:
    assert {name: w["mountinfo"] for name, w in walks.items() if w["mountinfo"] > 1} == {}


def test_a_direct_descriptor_is_opened_only_when_direct_reads_were_chosen(
    walks: dict[str, dict[str, Any]],
) -> None:
    for name, w in walks.items():
        assert w["direct_fd"] <= (1 if w["direct"] else 0), name
    for name in ("numpy", "torch", "torch mmap", "numpy views"):  # warm, or views: no copies
        assert not walks[name]["direct"], name


def test_warm_loads_decide_without_a_second_look(walks: dict[str, dict[str, Any]]) -> None:
    """The lazy mapping of a warm file, the default of torch's load_file, reads the mount
    table once and opens nothing else; asked for explicitly, it looks at nothing."""
    assert walks["torch"] == {"file": 1, "mountinfo": 1, "direct_fd": 0, "direct": False}
    for name in ("torch mmap", "torch mmap cold"):
        assert walks[name] == {"file": 1, "mountinfo": 0, "direct_fd": 0, "direct": False}


def test_a_local_load_imports_no_remote_or_cache_machinery(tmp_path: Path) -> None:
    """What a plain local load_file imports: no HTTP transport, chunk cache, S3, store
    implementation, checkpoint opener, writer, dataset or Spark module (each is loaded when
    a URL, a cache, a store, a checkpoint or a save asks for it). (torch itself imports
    ``http.client``.)"""
    path = tmp_path / "m.safetensors"
    ref.save_file({"a": np.zeros(3, np.float32)}, str(path))
    code = (
        "import sys; import tensorfile.safetensors.torch as t, tensorfile.safetensors.numpy as n;"
        f" t.load_file({str(path)!r}); n.load_file({str(path)!r});"
        " print(' '.join(sorted(sys.modules)))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    loaded = proc.stdout.split()
    unneeded = (
        "tensorfile.sources.http",
        "tensorfile.sources.cache",
        "tensorfile.sources.s3",
        "tensorfile.sources.stores.local_store",
        "tensorfile.sources.stores.fsspec_store",
        "tensorfile.formats.checkpoint",
        "tensorfile.formats.open",
        "tensorfile.formats.safetensors._writer",
        "tensorfile.formats.safetensors._serialize",
        "tensorfile.formats.safetensors._sharded",
        "tensorfile.core.atomic",
        "tensorfile.dataset",
        "tensorfile.spark",
        "tensorfile.ops",
        "fsspec",
    )
    assert [m for m in loaded if m.startswith(unneeded)] == []
