"""``tensorfile id`` (structural hash, ``--content``) and ``tensorfile summary``: the hashes are
recomputed here from the documented recipes and from what the files were written with."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers import weight_inspect as wi
from tests.helpers.checkpoints import (
    MODEL,
    MODEL_META,
    SAFETENSORS_DTYPE,
    write_gguf,
    write_safetensors,
    write_sharded,
    write_zt,
)
from tests.helpers.cli import assert_one_error, run, run_json, run_proc
from tests.helpers.digests import digest_text

KNOWN_ID = "625a71753a42bd1b8b43e866dc9c8c0b4535394b9f54707a6dc13593b842a873"


def _structural(
    fmt: str,
    metadata: dict[str, str],
    tensors: dict[str, tuple[str, list[int], int]],
    gguf_version: int | None = None,
) -> str:
    """weight-inspect's recipe: compact JSON, maps sorted by key, dtypes lower-cased, each
    metadata value canonicalised to text (already done by the caller)."""
    doc: dict[str, Any] = {"format": fmt}
    if gguf_version is not None:
        doc["gguf_version"] = gguf_version
    doc["metadata"] = {k: metadata[k] for k in sorted(metadata)}
    doc["tensors"] = {
        name: {"name": name, "dtype": dt.lower(), "shape": shape, "byte_length": n}
        for name, (dt, shape, n) in sorted(tensors.items())
    }
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _content(tensors: dict[str, tuple[str, list[int], bytes]], algorithm: str = "sha256") -> str:
    """The content id (v2): per tensor in name order, its name, common dtype and shape as
    compact JSON, then the digest of its dense bytes, each followed by a newline; an id of
    xxh3 or crc32c digests names its algorithm."""
    h = hashlib.sha256(b"tensorfile-content-v2\n")
    for name in sorted(tensors):
        dt, shape, data = tensors[name]
        head = {"name": name, "dtype": dt, "shape": shape}
        h.update(json.dumps(head, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
        h.update(digest_text(algorithm, data).encode() + b"\n")
    return h.hexdigest() if algorithm == "sha256" else f"{algorithm}:{h.hexdigest()}"


def _model_content(model: dict[str, np.ndarray[Any, Any]], algorithm: str = "sha256") -> str:
    return _content(
        {
            n: (SAFETENSORS_DTYPE[a.dtype.name], list(a.shape), np.ascontiguousarray(a).tobytes())
            for n, a in model.items()
        },
        algorithm,
    )


def _id(capsys: Any, *argv: Any) -> str:
    r = run(capsys, "id", *argv)
    assert r.code == 0, r
    assert r.err == ""
    assert r.out.endswith("\n")
    assert r.out.count("\n") == 1
    return r.out[:-1]


# -- structural hash ---------------------------------------------------------------------------


def test_id_known_structural_hash(tmp_path: Path, capsys: Any) -> None:
    path = write_safetensors(
        tmp_path / "one.safetensors", {"test.weight.0": np.zeros((64, 128), np.float32)}
    )
    assert _id(capsys, path) == KNOWN_ID
    assert _structural("safetensors", {}, {"test.weight.0": ("F32", [64, 128], 32768)}) == KNOWN_ID


def test_id_json(tmp_path: Path, capsys: Any) -> None:
    path = write_safetensors(
        tmp_path / "one.safetensors", {"test.weight.0": np.zeros((64, 128), np.float32)}
    )
    assert run_json(capsys, "id", path) == {
        "schema": 1,
        "format": "safetensors",
        "path": str(path),
        "structural_hash": KNOWN_ID,
        "tensor_count": 1,
        "metadata_count": 0,
    }
    path = write_zt(tmp_path / "m.zt", attributes=MODEL_META)
    doc = run_json(capsys, "id", path)
    assert doc == {
        "schema": 1,
        "format": "ztensor",
        "path": str(path),
        "structural_hash": _id(capsys, path),
        "tensor_count": 7,
        "metadata_count": 2,
    }


def test_id_structural_hash_with_metadata(tmp_path: Path, capsys: Any) -> None:
    path = write_safetensors(tmp_path / "m.safetensors", metadata=MODEL_META)
    tensors = {
        n: (SAFETENSORS_DTYPE[a.dtype.name], list(a.shape), a.nbytes) for n, a in MODEL.items()
    }
    canonical_meta = {k: json.dumps(v) for k, v in MODEL_META.items()}  # "pt" -> "\"pt\""
    assert _id(capsys, path) == _structural("safetensors", canonical_meta, tensors)
    # metadata is part of the structure; tensor values are not
    other = write_safetensors(tmp_path / "o.safetensors", metadata={**MODEL_META, "note": "x"})
    assert _id(capsys, other) != _id(capsys, path)
    changed = {**MODEL, "model.norm.scale": np.array([5, 6], np.int32)}
    same_shape = write_safetensors(tmp_path / "v.safetensors", changed, MODEL_META)
    assert _id(capsys, same_shape) == _id(capsys, path)


@pytest.mark.parametrize("name", sorted(wi.KNOWN_ANSWERS))
def test_id_and_summary_of_non_ascii_metadata(tmp_path: Path, capsys: Any, name: str) -> None:
    """Metadata with non-ASCII text (kept raw by weight-inspect), ASCII controls (escaped):
    ``id`` and ``summary``, human and --json, print the hash the real weight-inspect prints."""
    metadata, want = wi.KNOWN_ANSWERS[name]
    path = wi.write_vector(tmp_path / "m.safetensors", metadata)
    assert _id(capsys, path) == want
    doc = run_json(capsys, "id", path)
    assert (doc["structural_hash"], doc["metadata_count"]) == (want, len(metadata))
    assert _summary(capsys, path) == f"safetensors,N/A,2,{len(metadata)},{want}"
    assert run_json(capsys, "summary", path)["structural_hash"] == want
    assert run_json(capsys, "inspect", path)["structural_hash"] == want


def test_id_of_non_ascii_metadata_as_a_process(tmp_path: Path) -> None:
    """The installed command, whatever the locale: the hash line is ASCII, and equal to the
    real weight-inspect's for every known-answer file and the GGUF one."""
    files = {
        wi.write_vector(tmp_path / f"{name}.safetensors", metadata): want
        for name, (metadata, want) in wi.KNOWN_ANSWERS.items()
    }
    files[wi.write_gguf_vector(tmp_path / "m.gguf")] = wi.GGUF_ANSWER
    for path, want in files.items():
        r = run_proc("id", path)
        assert (r.code, r.out, r.err) == (0, want + "\n", ""), path
    r = run_proc("summary", next(iter(files)))
    assert r.code == 0 and r.out.endswith("," + next(iter(files.values())) + "\n")


def test_id_ztensor_structural_hash_ignores_compression(tmp_path: Path, capsys: Any) -> None:
    raw = write_zt(tmp_path / "raw.zt", attributes=MODEL_META)
    packed = write_zt(tmp_path / "z.zt", attributes=MODEL_META, compression="zstd")
    tensors = {n: (a.dtype.name, list(a.shape), a.nbytes) for n, a in MODEL.items()}
    canonical_meta = {k: json.dumps(v) for k, v in MODEL_META.items()}
    want = _structural("ztensor", canonical_meta, tensors)
    assert _id(capsys, raw) == want
    assert _id(capsys, packed) == want


def test_id_gguf_structural_hash(tmp_path: Path, capsys: Any) -> None:
    path = write_gguf(
        tmp_path / "m.gguf",
        {"tok.weight": np.ones((4, 8), np.float32), "out.weight": np.ones(8, np.float16)},
        [("add_uint32", "llama.block_count", 2), ("add_float32", "x.scale", 0.5)],
    )
    bits = struct.unpack("<I", struct.pack("<f", 0.5))[0]
    meta = {"general.architecture": '"llama"', "llama.block_count": "2", "x.scale": f"f32:{bits}"}
    tensors = {"tok.weight": ("f32", [8, 4], 128), "out.weight": ("f16", [8], 16)}
    assert _id(capsys, path) == _structural("gguf", meta, tensors, gguf_version=3)


def test_id_sharded_equals_single_file(tmp_path: Path, capsys: Any) -> None:
    names = sorted(MODEL)
    meta = {"format": "pt"}
    index = write_sharded(
        tmp_path / "ckpt",
        [{n: MODEL[n] for n in names[:2]}, {n: MODEL[n] for n in names[2:]}],
        [meta, meta],
    )
    single = write_safetensors(tmp_path / "single.safetensors", metadata=meta)
    want = _id(capsys, single)
    assert _id(capsys, index) == want
    assert _id(capsys, index.parent) == want
    assert _id(capsys, index.parent / "*.safetensors") == want
    assert _id(capsys, single, "--content") == _id(capsys, index, "--content")
    assert _id(capsys, index.parent / "model-0000?-of-00002.safetensors", "--content") == _id(
        capsys, single, "--content"
    )


# -- content id --------------------------------------------------------------------------------


def test_id_content_same_across_formats(tmp_path: Path, capsys: Any) -> None:
    from safetensors.numpy import save_file as ref_save

    ref = tmp_path / "ref.safetensors"
    ref_save(dict(MODEL), str(ref), metadata={"who": "reference"})
    files = [
        write_safetensors(tmp_path / "m.safetensors", metadata=MODEL_META),
        ref,
        write_zt(tmp_path / "raw.zt", attributes=MODEL_META),
        write_zt(tmp_path / "zstd.zt", compression="zstd"),
        write_zt(tmp_path / "crc.zt", compression="zstd", checksum="crc32c"),
    ]
    want = _model_content(MODEL)
    assert [_id(capsys, f, "--content") for f in files] == [want] * len(files)
    # ...and it is not the structural hash
    assert want != _id(capsys, files[0])


@pytest.mark.parametrize(
    "change",
    ["value", "name", "dtype", "shape"],
)
def test_id_content_changes_with_the_tensors(tmp_path: Path, capsys: Any, change: str) -> None:
    base = write_safetensors(tmp_path / "a.safetensors")
    other = dict(MODEL)
    if change == "value":
        w = MODEL["lm_head.weight"].copy()
        w[3, 5] += 1
        other["lm_head.weight"] = w
    elif change == "name":
        other["lm_head.w"] = other.pop("lm_head.weight")
    elif change == "dtype":  # the same bytes, read as int32
        other["lm_head.weight"] = MODEL["lm_head.weight"].view(np.int32)
    else:
        other["lm_head.weight"] = MODEL["lm_head.weight"].reshape(6, 4)
    for writer, name in ((write_safetensors, "b.safetensors"), (write_zt, "b.zt")):
        path = writer(tmp_path / name, other)
        got = _id(capsys, path, "--content")
        assert got == _model_content(other)
        assert got != _id(capsys, base, "--content")


def test_id_content_ignores_metadata(tmp_path: Path, capsys: Any) -> None:
    a = write_safetensors(tmp_path / "a.safetensors", metadata={"k": "1"})
    b = write_safetensors(tmp_path / "b.safetensors", metadata={"k": "2"})
    assert _id(capsys, a, "--content") == _id(capsys, b, "--content")
    assert _id(capsys, a) != _id(capsys, b)


def test_id_content_json(tmp_path: Path, capsys: Any) -> None:
    path = write_zt(tmp_path / "m.zt", attributes=MODEL_META, compression="zstd")
    assert run_json(capsys, "id", path, "--content") == {
        "schema": 1,
        "format": "ztensor",
        "path": str(path),
        "content_hash": _model_content(MODEL),
        "content_algorithm": "sha256",
        "tensor_count": 7,
        "metadata_count": 2,
    }


@pytest.mark.parametrize("algorithm", ["xxh3", "crc32c", "sha256"])
def test_id_content_digest_json(tmp_path: Path, capsys: Any, algorithm: str) -> None:
    from tensorfile.safetensors.numpy import save_file

    plain = write_safetensors(tmp_path / "plain.safetensors")
    digested = tmp_path / "digested.safetensors"
    save_file(dict(MODEL), str(digested), checksum=algorithm)
    zt = write_zt(tmp_path / "m.zt", compression="zstd")
    want = _model_content(MODEL, algorithm)
    assert (want == _model_content(MODEL)) == (algorithm == "sha256")  # sha256: the default
    for path in (plain, digested, zt):
        doc = run_json(capsys, "id", path, "--content", "--digest", algorithm)
        assert doc["content_hash"] == want, path
        assert doc["content_algorithm"] == algorithm
        assert _id(capsys, path, "--content", "--digest", algorithm) == want
        trusted = (path, "--content", "--digest", algorithm, "--trust-stored-digests")
        assert _id(capsys, *trusted) == want  # an intact file: the same id either way
    assert _id(capsys, digested, "--content", "--digest", algorithm, "--verify") == want
    for path in (plain, zt):  # no digests to check: said on stderr, the id still printed
        r = run(capsys, "id", path, "--content", "--digest", algorithm, "--verify")
        assert (r.code, r.out) == (0, want + "\n")
        assert r.err.startswith("tensorfile: warning: ") and "stores no digests" in r.err


def _flip_one_byte(path: Path, name: str) -> dict[str, np.ndarray[Any, Any]]:
    """Flip a bit of tensor ``name``'s stored bytes in place (header and digests kept);
    the model as the file now holds it."""
    import tensorfile

    with tensorfile.open(str(path)) as r:
        at = r.info(name).byte_range.start + 5
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    changed = bytearray(np.ascontiguousarray(MODEL[name]).tobytes())
    changed[5] ^= 0x01
    array = np.frombuffer(bytes(changed), MODEL[name].dtype).reshape(MODEL[name].shape)
    return {**MODEL, name: array}


def test_id_content_verify_catches_a_changed_byte(tmp_path: Path, capsys: Any) -> None:
    from tensorfile.safetensors.numpy import save_file

    path = tmp_path / "m.safetensors"
    save_file(dict(MODEL), str(path), checksum="xxh3")
    want = _model_content(MODEL, "xxh3")
    _flip_one_byte(path, "lm_head.weight")
    # trusted, the stored digests stand for the data: the id is what the file claims...
    assert _id(capsys, path, "--content", "--digest", "xxh3", "--trust-stored-digests") == want
    # ...until they are checked
    r = run(capsys, "id", path, "--content", "--digest", "xxh3", "--verify")
    message = assert_one_error(r, contains="'lm_head.weight'")
    assert "digest" in message
    r = run(capsys, "id", path, "--content", "--verify", "--json")  # any --digest: all checked
    assert_one_error(r, contains="'lm_head.weight'")


@pytest.mark.parametrize(
    ("kind", "checksum"),
    [("safetensors", "sha256"), ("safetensors", "xxh3"), ("zt2", "sha256"), ("zt", "crc32c")],
)
def test_id_content_of_a_forged_file_is_not_the_intact_one(
    tmp_path: Path, capsys: Any, kind: str, checksum: str
) -> None:
    """The issue's reproducer: a file saved with per-tensor digests, then one data byte
    flipped. ``id --content`` reads the bytes: the forged file gets another id (that of
    its bytes); only --trust-stored-digests gives the intact file's, as documented."""
    import tensorfile
    from tensorfile.safetensors.numpy import save_file

    path = tmp_path / f"m.{kind}"
    if kind == "safetensors":  # tensorfile's own writer, with digests in the metadata
        save_file(dict(MODEL), str(path), checksum=checksum)
    else:  # zTensor v2 (v1.0) written by tensorfile with --checksum
        plain = write_safetensors(tmp_path / "plain.safetensors")
        r = run(capsys, "convert", plain, path, "--to", kind, "--checksum", checksum)
        assert r.code == 0, r
    algorithm = "sha256" if checksum == "sha256" else checksum
    options = ("--content",) if algorithm == "sha256" else ("--content", "--digest", algorithm)
    intact = _model_content(MODEL, algorithm)
    kept = tmp_path / f"intact.{kind}"
    kept.write_bytes(path.read_bytes())
    assert _id(capsys, path, *options) == intact
    changed = _flip_one_byte(path, "lm_head.weight")
    with tensorfile.open(str(path), verify=False) as f:  # the flip is in the data
        assert not np.array_equal(f.get_tensor("lm_head.weight"), MODEL["lm_head.weight"])
    forged = _id(capsys, path, *options)
    assert forged != intact
    assert forged == _model_content(changed, algorithm)  # the id of the bytes it holds
    # the opt-in: the stored digests stand for the data, the same id on the intact file...
    assert _id(capsys, kept, *options, "--trust-stored-digests") == intact
    # ...and, as documented, the intact file's id on the forged one
    assert _id(capsys, path, *options, "--trust-stored-digests") == intact
    r = run(capsys, "id", path, *options, "--verify")
    assert_one_error(r, contains="'lm_head.weight'")


def test_id_verify_and_trust_stored_digests_exclude_each_other(tmp_path: Path, capsys: Any) -> None:
    path = write_safetensors(tmp_path / "m.safetensors")
    r = run(capsys, "id", path, "--content", "--verify", "--trust-stored-digests")
    assert_one_error(r, code=2, contains="exclude each other")


@pytest.mark.parametrize(
    "options",
    [
        ["--digest", "xxh3"],
        ["--verify"],
        ["--digest", "sha256", "--verify"],
        ["--trust-stored-digests"],
    ],
)
def test_id_digest_options_need_content(tmp_path: Path, capsys: Any, options: list[str]) -> None:
    path = write_safetensors(tmp_path / "m.safetensors")
    r = run(capsys, "id", path, *options)
    message = assert_one_error(r, code=2, contains="--content")
    assert "usage: tensorfile id" in message
    r = run(capsys, "id", path, "--content", "--digest", "md5")
    assert_one_error(r, code=2, contains="--digest")


def test_id_content_gguf(tmp_path: Path, capsys: Any) -> None:
    tok = np.arange(32, dtype=np.float32).reshape(4, 8)
    out = np.arange(8, dtype=np.float16)
    path = write_gguf(tmp_path / "m.gguf", {"tok.weight": tok, "out.weight": out})
    # shapes row-major, as in safetensors (not ggml's innermost-first order)
    want = _content(
        {"tok.weight": ("F32", [4, 8], tok.tobytes()), "out.weight": ("F16", [8], out.tobytes())}
    )
    assert _id(capsys, path, "--content") == want


# -- summary -----------------------------------------------------------------------------------


def _summary(capsys: Any, path: Any) -> str:
    r = run(capsys, "summary", path)
    assert r.code == 0, r
    assert r.err == ""
    assert r.out.count("\n") == 1
    return r.out[:-1]


def test_summary_safetensors_known(tmp_path: Path, capsys: Any) -> None:
    path = write_safetensors(
        tmp_path / "one.safetensors", {"test.weight.0": np.zeros((64, 128), np.float32)}
    )
    assert _summary(capsys, path) == f"safetensors,N/A,1,0,{KNOWN_ID}"


def test_summary_each_format(tmp_path: Path, capsys: Any) -> None:
    st = write_safetensors(tmp_path / "m.safetensors", metadata=MODEL_META)
    assert _summary(capsys, st) == f"safetensors,N/A,7,2,{_id(capsys, st)}"
    zt = write_zt(tmp_path / "m.zt", attributes={"a": "1", "b": "2", "c": "3"})
    assert _summary(capsys, zt) == f"ztensor,1.0,7,3,{_id(capsys, zt)}"
    gg = write_gguf(
        tmp_path / "m.gguf",
        {"tok.weight": np.ones((4, 8), np.float32), "out.weight": np.ones(8, np.float16)},
        [("add_uint32", "llama.block_count", 2), ("add_string", "general.name", "tiny")],
    )
    assert _summary(capsys, gg) == f"gguf,3,2,3,{_id(capsys, gg)}"
    # the hashes are those of the recipe, not just self-consistent
    tensors = {"tok.weight": ("f32", [8, 4], 128), "out.weight": ("f16", [8], 16)}
    meta = {"general.architecture": '"llama"', "general.name": '"tiny"', "llama.block_count": "2"}
    assert _summary(capsys, gg).endswith("," + _structural("gguf", meta, tensors, 3))


def test_summary_json(tmp_path: Path, capsys: Any) -> None:
    zt = write_zt(tmp_path / "m.zt", attributes=MODEL_META)
    assert run_json(capsys, "summary", zt) == {
        "schema": 1,
        "format": "ztensor",
        "path": str(zt),
        "version": "1.0",
        "tensor_count": 7,
        "metadata_count": 2,
        "structural_hash": _id(capsys, zt),
    }
    st = write_safetensors(tmp_path / "m.safetensors")
    doc = run_json(capsys, "summary", st)
    assert doc["version"] is None
    assert (doc["format"], doc["tensor_count"], doc["metadata_count"]) == ("safetensors", 7, 0)


@pytest.mark.parametrize("how", ["index", "folder", "glob"])
def test_summary_sharded(tmp_path: Path, capsys: Any, how: str) -> None:
    names = sorted(MODEL)
    index = write_sharded(
        tmp_path / "ckpt",
        [{n: MODEL[n] for n in names[:4]}, {n: MODEL[n] for n in names[4:]}],
        [{"format": "pt"}, {"format": "pt", "extra": "1"}],
    )
    target = {"index": index, "folder": index.parent, "glob": index.parent / "*.safetensors"}[how]
    # the metadata of several files is what they agree on: {"format": "pt"}
    single = write_safetensors(tmp_path / "s.safetensors", metadata={"format": "pt"})
    assert _summary(capsys, target) == f"safetensors,N/A,7,1,{_id(capsys, single)}"
