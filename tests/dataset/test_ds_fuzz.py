"""Property-based fuzzing of manifests and indexes: whatever a manifest or an index says,
opening and reading the dataset raises only TensorFileError, and what it returns is true.

* JSON-level mutations of valid manifests (types, numbers huge, negative, NaN, infinite or
  of 5,000 digits, keys removed or added, deep nesting), then open, len, iteration, ds[i],
  batches, get and to_torch;
* byte-level mutations of manifests;
* byte-level mutations of index files and schema-level lies (types, nulls, rows dropped,
  duplicated, moved to other shards, renamed): get(key) gives the right sample or a
  TensorFileError, never a wrong sample and never "not found" for a key the shards hold;
* the nastiest cases again in a fresh interpreter under RLIMIT_AS = 2 GiB and a timeout:
  bounded memory and time, and still only TensorFileError.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorfile import dataset
from tensorfile.errors import FormatError, SourceError, TensorFileError, TensorNotFoundError
from tests.helpers.lying_datasets import INDEX, MANIFEST

FUZZ = settings(
    max_examples=75,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

N_BATCH, N_KV = 10, 8
X = np.arange(N_BATCH * 3, dtype=np.float32).reshape(N_BATCH, 3)
KEYS = [f"key{i}" for i in range(N_KV)]
V = np.arange(N_KV * 2, dtype=np.int32).reshape(N_KV, 2)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fuzz")
    dataset.write({"x": X, "id": np.arange(N_BATCH)}, root / "batch", batch_size=4)
    dataset.write(
        {"name": KEYS, "v": V},
        root / "kv",
        name_col="name",
        target_shard_size_mb=200 / 2**20,
        generate_index=True,
    )
    return {"batch": root / "batch", "kv": root / "kv"}


@contextlib.contextmanager
def replaced(path: Path, data: bytes) -> Iterator[None]:
    """``path`` holds ``data`` inside the block, its own bytes again after."""
    original = path.read_bytes()
    path.write_bytes(data)
    try:
        yield
    finally:
        path.write_bytes(original)


# -- what a reader may return -----------------------------------------------------------------


def check_sample(mode: str, sample: dict[str, Any]) -> None:
    """A sample read from a lying dataset is still one the shards really hold (of the columns
    the manifest names: dropping one from its schema is an honest smaller dataset)."""
    if mode == "batch":
        if "id" in sample:
            i = int(sample["id"])
            assert 0 <= i < N_BATCH
            if "x" in sample:
                assert sample["x"].tolist() == X[i].tolist()
        elif "x" in sample:
            assert sample["x"].tolist() in X.tolist()
    else:
        i = KEYS.index(sample["key"])
        assert sample["v"].tolist() == V[i].tolist()


def exercise(folder: Path, mode: str) -> None:
    """Everything a user does with a dataset; only TensorFileError may escape."""
    ds = dataset.open(folder)
    n = len(ds)
    assert n >= 0
    for sample in ds:
        check_sample(ds.mode, sample)
    for i in {0, n - 1, -1, -n} if n else set():
        check_sample(ds.mode, ds[i])
    for batch in ds.batches(3):
        assert len({len(v) for v in batch.values()}) == 1
    if ds.mode == "kv":
        for key in (KEYS[0], KEYS[-1], "missing"):
            try:
                check_sample("kv", ds.get(key))
            except TensorNotFoundError:
                pass
    for sample in ds.to_torch():
        check_sample(
            ds.mode, {k: v if isinstance(v, str) else v.numpy() for k, v in sample.items()}
        )


def only_ours(folder: Path, mode: str) -> None:
    """:func:`exercise`, where a TensorFileError (with a message) is a fine outcome."""
    error: TensorFileError | None = None
    try:
        exercise(folder, mode)
    except TensorFileError as exc:
        error = exc
    assert error is None or str(error)


# -- JSON-level mutations of manifests ---------------------------------------------------------

SPECIAL = {
    "@@BIG@@": "1" + "0" * 5000,
    "@@NEGBIG@@": "-1" + "0" * 4000,
    "@@NAN@@": "NaN",
    "@@INF@@": "1e999",
    "@@NEGINF@@": "-Infinity",
    "@@DEEP@@": "[" * 60_000 + "]" * 60_000,
    "@@DEEPOBJ@@": '{"a":' * 60_000 + "0" + "}" * 60_000,
    "@@FLOAT@@": "4.000000001",
}
SCALARS = st.one_of(
    st.integers(),
    st.sampled_from([-1, 0, 1, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63), 10**30]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.text(max_size=12),
    st.sampled_from(
        [
            "../x.safetensors",
            "/etc/passwd",
            MANIFEST,
            INDEX,
            "",
            "a//b.safetensors",
            "sub/../x.safetensors",
            "F32",
            "BF16",
            "I32",
            "C64",
            "F4",
            "kv",
            "batch",
            "1.0",
            "x",
            "v",
            "__",
        ]
    ),
    st.sampled_from(sorted(SPECIAL)),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def mutate(data: st.DataObject, node: Any) -> Any:
    """``node`` with one change somewhere inside it."""
    ops = ["replace"]
    if isinstance(node, int) and not isinstance(node, bool):
        ops += ["nudge", "nudge"]
    if isinstance(node, dict | list):
        ops += ["add"]
        if node:
            ops += ["descend"] * 4 + ["delete"]
    op = data.draw(st.sampled_from(ops))
    if op == "replace":
        return data.draw(VALUES)
    if op == "nudge":
        return node + data.draw(st.sampled_from([-1, 1, 2, 1000, -(10**6), 2**62]))
    if op == "add":
        if isinstance(node, dict):
            node[data.draw(st.sampled_from(["shards", "schema", "tensorfile", "x", "zz"]))] = (
                data.draw(VALUES)
            )
        else:
            node.append(data.draw(VALUES))
        return node
    keys = list(node) if isinstance(node, dict) else list(range(len(node)))
    key = data.draw(st.sampled_from(keys))
    if op == "delete":
        del node[key]
    else:
        node[key] = mutate(data, node[key])
    return node


def render(doc: Any) -> bytes:
    text = json.dumps(doc)
    for mark, raw in SPECIAL.items():
        text = text.replace(json.dumps(mark), raw)
    return text.encode()


@pytest.mark.parametrize("mode", ["batch", "kv"])
@FUZZ
@given(data=st.data())
def test_mutated_manifests_raise_only_our_errors(
    folders: dict[str, Path], mode: str, data: st.DataObject
) -> None:
    folder = folders[mode]
    doc = json.loads((folder / MANIFEST).read_text())
    for _ in range(data.draw(st.integers(1, 3))):
        doc = mutate(data, doc)
    with replaced(folder / MANIFEST, render(doc)):
        only_ours(folder, mode)


@pytest.mark.parametrize("mode", ["batch", "kv"])
@FUZZ
@given(data=st.data())
def test_byte_mutated_manifests_raise_only_our_errors(
    folders: dict[str, Path], mode: str, data: st.DataObject
) -> None:
    folder = folders[mode]
    raw = bytearray((folder / MANIFEST).read_bytes())
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] = data.draw(st.sampled_from([*b'{}[]",:-019eE. \\\x00\xff', *b"NaI"]))
    with replaced(folder / MANIFEST, bytes(raw)):
        only_ours(folder, mode)


# -- indexes -----------------------------------------------------------------------------------


def get_all(folder: Path) -> None:
    """Every key gives its true sample or a FormatError/SourceError (a corrupt index); a key
    the shards hold is never reported missing, and a missing key is never found."""
    ds = dataset.open(folder)
    for i, key in enumerate(KEYS):
        try:
            got = ds.get(key)
        except TensorNotFoundError as exc:
            raise AssertionError(f"{key} is in the shards, but: {exc}") from exc
        except (FormatError, SourceError):
            return  # a corrupt index fails every lookup alike
        assert got["key"] == key
        assert got["v"].tolist() == V[i].tolist()
    with pytest.raises(TensorNotFoundError):
        ds.get("absent")


INTS = [b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80", b"\xff\xff\xff\xff", b"\x00\x00\x00\x00"]


@FUZZ
@given(data=st.data())
def test_byte_mutated_indexes(folders: dict[str, Path], data: st.DataObject) -> None:
    folder = folders["kv"]
    raw = bytearray((folder / INDEX).read_bytes())
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        op = data.draw(st.sampled_from(["set", "flip", "int", "cut", "insert"]))
        if op == "set":
            raw[pos] = data.draw(st.integers(0, 255))
        elif op == "flip":
            raw[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "int":
            raw[pos : pos + 4] = data.draw(st.sampled_from(INTS))
        elif op == "cut":
            del raw[pos : pos + data.draw(st.integers(1, 16))]
        else:
            raw[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
        if not raw:
            break
    with replaced(folder / INDEX, bytes(raw)):
        try:
            get_all(folder)
        except TensorFileError as exc:
            raise AssertionError(f"get_all lets {exc!r} through") from exc


INDEX_TYPES = [pa.string(), pa.large_string(), pa.binary(), pa.int64(), pa.list_(pa.string())]


def _column(values: list[Any], typ: pa.DataType) -> pa.Array:
    if pa.types.is_integer(typ):
        return pa.array([len(v) if isinstance(v, str) else None for v in values], typ)
    if pa.types.is_list(typ):
        return pa.array([[v] for v in values], typ)
    if pa.types.is_binary(typ):
        return pa.array([v.encode() if isinstance(v, str) else None for v in values], typ)
    return pa.array(values, typ)


@FUZZ
@given(data=st.data())
def test_schema_level_index_lies(folders: dict[str, Path], data: st.DataObject) -> None:
    folder = folders["kv"]
    rows = pq.read_table(folder / INDEX).to_pylist()
    files = sorted({r["file_name"] for r in rows})
    names = [*files, "../" + files[0], "/etc/passwd", "", "x.safetensors"]
    for _ in range(data.draw(st.integers(0, 6))):
        op = data.draw(st.sampled_from(["drop", "dup", "move", "rename", "null", "add"]))
        if op == "add" or not rows:
            key = data.draw(st.sampled_from([f"{k}__v" for k in KEYS] + ["ghost__v", ""]))
            rows.append({"tensor_key": key, "file_name": data.draw(st.sampled_from(names))})
            continue
        i = data.draw(st.integers(0, len(rows) - 1))
        if op == "drop":
            del rows[i]
        elif op == "dup":
            rows.append(dict(rows[i]))
        elif op == "move":
            rows[i]["file_name"] = data.draw(st.sampled_from(names))
        elif op == "rename":
            rows[i]["tensor_key"] = data.draw(st.text(max_size=8))
        else:
            rows[i][data.draw(st.sampled_from(["tensor_key", "file_name"]))] = None
    key_type = data.draw(st.sampled_from(INDEX_TYPES))
    file_type = data.draw(st.sampled_from(INDEX_TYPES))
    table = pa.table(
        {
            "tensor_key": _column([r.get("tensor_key") for r in rows], key_type),
            "file_name": _column([r.get("file_name") for r in rows], file_type),
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    with replaced(folder / INDEX, sink.getvalue().to_pybytes()):
        get_all(folder)


# -- the nastiest cases, with bounded memory and time ---------------------------------------------

NASTY = textwrap.dedent(
    r"""
    import json, os, random, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    def peak_kib():
        # VmHWM: this program's peak. (ru_maxrss would count the pytest process's RSS at
        # the fork before exec: Linux keeps the larger of the two across execve.)
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    import numpy as np
    from tensorfile import dataset
    from tensorfile.errors import TensorFileError, TensorNotFoundError

    root = sys.argv[1]
    b, kv = os.path.join(root, "b"), os.path.join(root, "kv")
    dataset.write({"x": np.zeros((10, 3), np.float32)}, b, batch_size=4)
    dataset.write({"k": [f"k{i}" for i in range(50)], "v": np.zeros((50, 2), np.int32)}, kv,
                  name_col="k", target_shard_size_mb=0.001, generate_index=True)
    manifest = {f: open(os.path.join(f, "dataset_manifest.json"), "rb").read() for f in (b, kv)}
    index = open(os.path.join(kv, "_tensor_index.parquet"), "rb").read()
    out = {}
    peaks = {}

    def run(name, folder, fn):
        try:
            fn(dataset.open(folder))
            out[name] = "ok"
        except TensorFileError as exc:
            out[name] = "ours"
        except BaseException as exc:
            out[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
        peaks[name] = peak_kib()
        for f in (b, kv):
            open(os.path.join(f, "dataset_manifest.json"), "wb").write(manifest[f])
        open(os.path.join(kv, "_tensor_index.parquet"), "wb").write(index)

    def doc(folder):
        return json.loads(manifest[folder])

    def put(folder, data):
        if not isinstance(data, bytes):
            data = json.dumps(data).encode()
        open(os.path.join(folder, "dataset_manifest.json"), "wb").write(data)

    read_all = lambda ds: (list(ds), [ds[i] for i in range(min(len(ds), 3))], list(ds.batches(7)))

    # a manifest of 1 TiB (sparse), 60 MiB of nesting, 60 MiB of numbers
    with open(os.path.join(b, "dataset_manifest.json"), "r+b") as f:
        f.truncate(1 << 40)
    run("sparse-manifest", b, read_all)
    put(b, b"[" * (60 << 20))
    run("deep-manifest", b, read_all)
    put(b, b'{"shards": [' + b"0," * (30 << 20) + b"0]}")
    run("wide-manifest", b, read_all)
    d = doc(b); d["shards"][0]["samples_count"] = 2**63 - 1 - 6; d["total_samples"] = 2**63 - 1
    put(b, d); run("max-samples", b, read_all)
    d = doc(b); d["schema"]["x"]["shape"] = [2**62] * 64
    put(b, d); run("huge-schema", b, read_all)
    d = doc(kv); d["shards"][0]["samples_count"] += 10**18; d["total_samples"] += 10**18
    put(kv, d); run("kv-samples", kv, read_all)

    def lookups(ds):
        for i in range(50):
            try:
                ds.get(f"k{i}")
            except TensorNotFoundError:
                raise AssertionError(f"k{i} reported missing")

    with open(os.path.join(kv, "_tensor_index.parquet"), "r+b") as f:
        f.truncate(1 << 40)
    run("sparse-index", kv, lookups)
    rng = random.Random(7)
    ints = [b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80", b"\xff\xff\xff\xff", b"\xff" * 8]
    for n in range(int(sys.argv[2])):
        raw = bytearray(index)
        for _ in range(rng.randint(1, 6)):
            p = rng.randrange(len(raw))
            if rng.random() < 0.5:
                raw[p:p + 4] = rng.choice(ints)
            else:
                raw[p] = rng.randrange(256)
        open(os.path.join(kv, "_tensor_index.parquet"), "wb").write(raw)
        run(f"index-{n}", kv, lookups)
    print(json.dumps(out))
    top = max(peaks.values())
    first = next(k for k, v in peaks.items() if v == top)  # the case that reached the peak
    print("PEAK", first, json.dumps({k: peaks[k] for k in list(peaks)[:8]}))
    print("MAXRSS", peak_kib())
    """
)


def test_nastiest_cases_under_a_memory_limit(tmp_path: Path) -> None:
    # The child measures its own peak (VmHWM): ru_maxrss counted the pytest process's RSS
    # at the fork (1.7 GiB in a whole run, with every framework imported), which Linux keeps
    # across execve. A clean environment: nothing a test run set earlier.
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    env["ARROW_DEFAULT_MEMORY_POOL"] = "system"  # what the reads hold, not a pool's cache
    proc = subprocess.run(
        [sys.executable, "-c", NASTY, str(tmp_path), "400"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    results = json.loads(lines[-3])
    bad = {k: v for k, v in results.items() if v not in ("ok", "ours")}
    assert bad == {}
    for name in ("sparse-manifest", "deep-manifest", "wide-manifest", "max-samples"):
        assert results[name] == "ours", name
    for name in ("huge-schema", "kv-samples", "sparse-index"):
        assert results[name] == "ours", name
    # KiB: well inside the 2 GiB limit (the second line says which case peaked, and the
    # peaks after the first cases)
    assert int(lines[-1].split()[1]) < 1536 * 1024, lines[-2]
