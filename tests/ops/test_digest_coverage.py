"""What ``verify=True`` and ``tensorfile verify`` cover: a tensor no stored digest covers is
said, never passed over in silence. A file with no digests warns every verified load
(NoDigestsWarning, which a program can make an error); a digest map that leaves a tensor out
lets that tensor's corruption through a verified load only with a warning naming it, and
fails ``verify`` (rule ``uncovered``); ``--strict`` fails a file with no digests at all.

Files are written by the reference safetensors library (a digest map made here with each
algorithm's own package), by tensorfile's writers and by the reference ``gguf`` package.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy as ref_numpy

import tensorfile
from tensorfile import ops, ztensor
from tensorfile.errors import NoDigestsWarning, TensorFileWarning, ZTensorWarning
from tensorfile.safetensors import numpy as st_numpy
from tensorfile.safetensors import safe_open
from tensorfile.safetensors import torch as st_torch
from tests.helpers.checkpoints import MODEL, write_gguf, write_sharded
from tests.helpers.cli import run, strict_json
from tests.helpers.digests import digest_text, flip_byte

ARRAYS = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(4, np.float32)}


def _partial_map(path: Path, covered: list[str], arrays: dict[str, Any] = ARRAYS) -> Path:
    """``arrays`` saved by the reference library with a ``tensorfile.digests`` map that
    covers only the ``covered`` tensors (digests by the algorithms' own packages)."""
    digests = {n: digest_text("sha256", np.ascontiguousarray(arrays[n]).tobytes()) for n in covered}
    ref_numpy.save_file(arrays, str(path), metadata={"tensorfile.digests": json.dumps(digests)})
    return path


def _read_all(path: str) -> None:
    """Every tensor of ``path``, through ``tensorfile.open(verify=True)``."""
    with tensorfile.open(path, verify=True) as f:
        for name in f.keys():
            f.get_tensor(name)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# -- a verified load of a file with no digests warns ---------------------------------------------

LOADS: dict[str, Callable[[str], Any]] = {
    "numpy.load_file": lambda p: st_numpy.load_file(p, verify=True),
    "numpy.load_file-view": lambda p: st_numpy.load_file(p, verify=True, copy=False),
    "torch.load_file": lambda p: st_torch.load_file(p, verify=True),
    "torch.load_file-pread": lambda p: st_torch.load_file(p, verify=True, backend="pread"),
    "safe_open": lambda p: safe_open(p, "np", verify=True).get_tensor("a"),
    "tensorfile.open": lambda p: tensorfile.open(p, verify=True).get_tensor("a"),
    "numpy.load_sharded": lambda p: st_numpy.load_sharded(p, verify=True),
    "content_hash": lambda p: ops.content_hash(p, verify=True),
}


@pytest.mark.parametrize("load", LOADS)
def test_a_verified_load_of_a_file_without_digests_warns(tmp_path: Path, load: str) -> None:
    path = tmp_path / "m.safetensors"
    ref_numpy.save_file(ARRAYS, str(path))  # the reference: no digests
    with pytest.warns(NoDigestsWarning, match=r"m\.safetensors stores no digests") as caught:
        got = LOADS[load](str(path))
    assert got is not None  # still loaded: a warning, not a refusal
    (w,) = [w for w in caught if w.category is NoDigestsWarning]
    assert "2 tensors" in str(w.message) and "verify=True" in str(w.message)
    assert w.filename == __file__  # attributed to the caller, however deep it was raised
    assert issubclass(w.category, TensorFileWarning) and issubclass(w.category, UserWarning)


@pytest.mark.parametrize("kind", ["zt", "zt2", "gguf", "checkpoint"])
def test_every_format_without_digests_warns(tmp_path: Path, kind: str) -> None:
    if kind == "gguf":
        path = write_gguf(tmp_path / "m.gguf", {"a": ARRAYS["a"]})
    elif kind == "checkpoint":  # each shard is a file of its own: named in its warning
        path = write_sharded(tmp_path / "ck", [{"a": ARRAYS["a"]}, {"b": ARRAYS["b"]}])
    else:
        plain = tmp_path / "plain.safetensors"
        ref_numpy.save_file(ARRAYS, str(plain))
        path = tmp_path / f"m.{kind}"
        ops.convert(str(plain), str(path), to=kind)  # no --checksum
    with pytest.warns(NoDigestsWarning, match="stores no digests") as caught:
        _read_all(str(path))
    named = sorted(str(w.message).partition(" stores")[0] for w in caught)
    if kind == "checkpoint":
        assert [os.path.basename(n) for n in named] == [
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
        ]
    else:
        assert named == [str(path)]


def test_the_warning_can_be_made_an_error_and_leaves_nothing_open(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    ref_numpy.save_file(ARRAYS, str(path))
    before = _open_fds()
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoDigestsWarning)
        for load in LOADS.values():
            with pytest.raises(NoDigestsWarning, match="stores no digests"):
                load(str(path))
        with warnings.catch_warnings():  # the base filters them all
            warnings.simplefilter("error", TensorFileWarning)
            with pytest.raises(TensorFileWarning):
                st_numpy.load_file(str(path), verify=True)
    assert _open_fds() == before


def test_digests_covering_every_tensor_and_unverified_loads_do_not_warn(tmp_path: Path) -> None:
    digested = tmp_path / "d.safetensors"
    st_numpy.save_file(ARRAYS, str(digested), checksum="xxh3")
    plain = tmp_path / "p.safetensors"
    ref_numpy.save_file(ARRAYS, str(plain))
    zt = tmp_path / "m.zt"
    ztensor.save_file(ARRAYS, str(zt))  # no checksum
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoDigestsWarning)
        for load in LOADS.values():
            load(str(digested))
        st_numpy.load_file(str(plain))  # not asked to verify: nothing to say
        tensorfile.open(str(plain)).close()
        ops.content_hash(str(plain))
        ztensor.load_file(str(zt))  # the zTensor drop-in verifies by default: silent
        tensorfile.open(str(zt)).close()


def test_no_digests_warning_sits_beside_the_ztensor_warning() -> None:
    assert issubclass(ZTensorWarning, TensorFileWarning)
    assert not issubclass(NoDigestsWarning, ZTensorWarning)
    assert NoDigestsWarning.__module__ == "tensorfile.core.errors"
    assert tensorfile.errors.NoDigestsWarning is NoDigestsWarning


# -- a digest map that leaves a tensor out -------------------------------------------------------


def test_a_tensor_the_digest_map_leaves_out_is_named_by_a_verified_load(tmp_path: Path) -> None:
    path = _partial_map(tmp_path / "m.safetensors", ["a"])
    flip_byte(path, "b", at=1)
    loaded = ref_numpy.load_file(str(path))  # the oracle: b's bytes really changed
    assert not np.array_equal(loaded["b"], ARRAYS["b"])
    match = r"1 tensor not covered by a digest: b; verify=True cannot check"
    for load in (LOADS["numpy.load_file"], LOADS["torch.load_file"], LOADS["safe_open"]):
        with pytest.warns(NoDigestsWarning, match=match):
            load(str(path))
    with pytest.warns(NoDigestsWarning, match=match):
        got = st_numpy.load_file(str(path), verify=True)
    assert np.array_equal(got["b"], loaded["b"])  # read as it is, but not in silence
    # the tensor the map covers is still checked
    flip_byte(path, "a", at=1)
    with pytest.warns(NoDigestsWarning), pytest.raises(tensorfile.ChecksumError, match="'a'"):
        st_numpy.load_file(str(path), verify=True)


def test_verify_fails_a_tensor_the_digest_map_leaves_out(tmp_path: Path, capsys: Any) -> None:
    path = _partial_map(tmp_path / "m.safetensors", ["a"])
    intact = ops.verify(str(path))
    assert (intact.ok, intact.digests_checked, intact.uncovered) == (False, 1, ("b",))
    flip_byte(path, "b", at=1)
    report = ops.verify(str(path))
    assert not report.ok
    assert [(f.subject, f.rule) for f in report.failures] == [("b", "uncovered")]
    assert report.uncovered == ("b",)
    assert "1 of the 2 tensors" in report.failures[0].message
    r = run(capsys, "verify", path)
    assert r.code == 1
    assert r.out.splitlines() == [
        f"{path}: FAILED (safetensors, 1 failure, 2 tensors read)",
        "  uncovered: 1 tensor not covered by a digest: b",
    ]
    assert r.err.startswith(f"tensorfile: error: {path}: b fails rule uncovered: no digest")
    doc = strict_json(run(capsys, "verify", path, "--json").out)
    assert (doc["ok"], doc["uncovered"], doc["digests_checked"]) == (False, ["b"], 1)
    assert doc["strict"] is False


@pytest.mark.parametrize(
    ("name", "options"),
    [("out.safetensors", {"checksum": "sha256"}), ("out.zt", {"to": "zt2", "checksum": "xxh3"}),
     ("copy.safetensors", {}), ("out.npz", {})],
)  # fmt: skip
def test_convert_names_the_tensors_no_digest_covered(
    tmp_path: Path, capsys: Any, name: str, options: dict[str, Any]
) -> None:
    """Review d09: ``convert --checksum`` turned a source failing verify (rule uncovered:
    b replaced, its digest dropped from the map) into a file that passes it, in silence.
    The result's notes (and the command line) name the tensors no stored digest covered."""
    src = _partial_map(tmp_path / "m.safetensors", ["a"])
    assert ops.verify(str(src)).uncovered == ("b",)
    result = ops.convert(src, tmp_path / name, **options)
    said = [n for n in result.notes if "leave out" in n]
    assert len(said) == 1, result.notes
    assert "1 tensor ('b')" in said[0] and "fails verify (rule uncovered)" in said[0]
    assert ("are new, over those unchecked bytes" in said[0]) == ("checksum" in options)
    got = run(capsys, "convert", src, tmp_path / f"cli-{name}", *(
        f"--{k}={v}" for k, v in options.items()))  # fmt: skip
    assert got.code == 0 and f"note: {said[0]}" in got.out.splitlines(), got.out
    covered = tmp_path / "all.safetensors"
    _partial_map(covered, ["a", "b"])  # every tensor covered: no such note
    assert not [n for n in ops.convert(covered, tmp_path / f"all-{name}", **options).notes
                if "leave out" in n]  # fmt: skip


def test_many_uncovered_tensors_are_one_line(tmp_path: Path, capsys: Any) -> None:
    names = sorted(MODEL)
    path = _partial_map(tmp_path / "m.safetensors", names[:1], MODEL)
    report = ops.verify(str(path))
    assert sorted(report.uncovered) == names[1:]  # in file order
    assert len(report.grouped()) == 1
    r = run(capsys, "verify", path)
    assert r.code == 1
    shown = ", ".join(report.uncovered[:5])
    assert r.out.splitlines()[1:] == [
        f"  uncovered: 6 tensors not covered by a digest: {shown} and 1 more"
    ]


def test_a_checkpoint_whose_shards_carry_digests_but_one(tmp_path: Path) -> None:
    shards = [{"a": ARRAYS["a"]}, {"b": ARRAYS["b"]}]
    index = write_sharded(tmp_path / "ck", shards)
    st_numpy.save_file(
        shards[0], str(tmp_path / "ck" / "model-00001-of-00002.safetensors"), checksum="crc32c"
    )
    report = ops.verify(str(index))
    assert [(f.subject, f.rule) for f in report.failures] == [("b", "uncovered")]
    with pytest.warns(NoDigestsWarning, match="model-00002-of-00002.safetensors stores no"):
        got = st_numpy.load_sharded(str(index), verify=True)
    assert sorted(got) == ["a", "b"]


# -- --strict: every tensor must be covered ------------------------------------------------------


@pytest.mark.parametrize("kind", ["safetensors", "gguf"])
def test_strict_fails_a_file_with_no_digests(tmp_path: Path, capsys: Any, kind: str) -> None:
    if kind == "gguf":
        path = write_gguf(tmp_path / "m.gguf", ARRAYS)
    else:
        path = tmp_path / "m.safetensors"
        ref_numpy.save_file(ARRAYS, str(path))
    relaxed = run(capsys, "verify", path)
    assert relaxed.code == 0 and "the file stores no digests" in relaxed.out
    assert ops.verify(str(path)).uncovered == ("a", "b")  # said either way
    report = ops.verify(str(path), strict=True)
    assert not report.ok and {f.rule for f in report.failures} == {"uncovered"}
    assert "strict verification needs one for every tensor" in report.failures[0].message
    r = run(capsys, "verify", path, "--strict")
    assert r.code == 1
    assert "  uncovered: 2 tensors not covered by a digest: a, b" in r.out.splitlines()
    assert strict_json(run(capsys, "verify", path, "--strict", "--json").out)["strict"] is True


def test_strict_passes_a_file_every_digest_covers(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "m.safetensors"
    st_numpy.save_file({**ARRAYS, "e": np.zeros((0, 2), np.float32)}, str(path), checksum="xxh3")
    zt2 = tmp_path / "m.zt"
    ops.convert(str(path), str(zt2), to="zt2", checksum="sha256", compression="zstd")
    for p in (path, zt2):
        assert ops.verify(str(p), strict=True).ok
        r = run(capsys, "verify", p, "--strict")
        assert r.code == 0, r
        assert "3 digests compared" in r.out


def test_a_tensor_with_no_elements_needs_no_digest(tmp_path: Path, capsys: Any) -> None:
    """No byte of an empty tensor can change unseen: a digest map that leaves it out (a
    writer may skip it) is not a failure, and a verified load does not name it."""
    arrays = {**ARRAYS, "e": np.zeros((0, 4), np.float32)}
    path = _partial_map(tmp_path / "m.safetensors", ["a", "b"], arrays)
    report = ops.verify(str(path), strict=True)
    assert (report.ok, report.uncovered, report.digests_checked) == (True, (), 2)
    assert run(capsys, "verify", path, "--strict").code == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoDigestsWarning)
        st_numpy.load_file(str(path), verify=True)
    plain = tmp_path / "plain.safetensors"
    ref_numpy.save_file(arrays, str(plain))
    with pytest.warns(NoDigestsWarning, match="of its 2 tensors"):
        st_numpy.load_file(str(plain), verify=True)
    assert ops.verify(str(plain)).uncovered == ("a", "b")
