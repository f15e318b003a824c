"""tensorfile.convert and `tensorfile convert`: every source and destination, the content id
kept, byte-identical safetensors copies, refused pickles, GGUF dequantization, sparse
tensors, option errors, SIGKILL mid-convert. The reference libraries (safetensors,
ztensor 1.0.1 and 2.1.2, huggingface_hub, gguf) read what convert writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gguf
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
import torch
import ztensor as zt1
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorfile import TensorFileError, UnsupportedError, ztensor
from tensorfile.errors import InvalidArgumentError
from tensorfile.ops import content_hash, convert
from tensorfile.safetensors.numpy import load_file, save_file
from tests.ztensor import zt2

CLI = [sys.executable, "-m", "tensorfile.cli.app"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)


def _tensors() -> dict[str, np.ndarray]:  # type: ignore[type-arg]
    rng = np.random.default_rng(3)
    return {
        "f32": rng.standard_normal((8, 5)).astype(np.float32),
        "f16": rng.standard_normal(7).astype(np.float16),
        "bf16": rng.standard_normal((2, 3)).astype(ml_dtypes.bfloat16),
        "i64": np.arange(9, dtype=np.int64),
        "u8": np.arange(4, dtype=np.uint8),
        "mask": np.array([True, False, True]),
        "scalar": np.array(2.5, np.float64),
        "empty": np.zeros((0, 3), np.float32),
    }


def test_round_trip_through_every_zt_keeps_the_content_id(tmp_path: Path) -> None:
    src = tmp_path / "a.safetensors"
    save_file(_tensors(), str(src), metadata={"license": "MIT"})
    want = content_hash(str(src))
    convert(src, tmp_path / "b.zt", checksum="crc32c", compression="zstd")
    convert(tmp_path / "b.zt", tmp_path / "c.zt", to="zt2", checksum="xxh3")
    convert(tmp_path / "c.zt", tmp_path / "d.safetensors")
    for name in ("b.zt", "c.zt", "d.safetensors"):
        assert content_hash(str(tmp_path / name)) == want, name
    assert safetensors.numpy.load_file(str(tmp_path / "d.safetensors")).keys() == _tensors().keys()
    with safetensors.safe_open(str(tmp_path / "d.safetensors"), "np") as f:
        assert f.metadata() == {"license": "MIT"}
    # the peers read the zTensor files
    reader = zt1.Reader(str(tmp_path / "b.zt"))
    assert np.array_equal(reader.read_tensor("f32"), _tensors()["f32"])
    peer = zt2.read(tmp_path / "c.zt")
    assert peer["objects"]["i64"]["parts"]["data"]["bytes"].tobytes() == _tensors()["i64"].tobytes()


def test_safetensors_to_safetensors_is_byte_identical(tmp_path: Path) -> None:
    src = tmp_path / "a.safetensors"
    save_file(_tensors(), str(src), metadata={"x": "y"})
    result = convert(src, tmp_path / "b.safetensors")
    assert (tmp_path / "b.safetensors").read_bytes() == src.read_bytes()
    assert result.bytes_out == src.stat().st_size


def test_pytorch_pickles_are_read_by_tensorfile_s_own_reader(tmp_path: Path) -> None:
    state = {"model": {"w": torch.randn(3, 4), "h": torch.ones(2, dtype=torch.bfloat16)}}
    torch.save(state, tmp_path / "m.pt")
    r = convert(tmp_path / "m.pt", tmp_path / "m.safetensors")
    assert r.source_format == "pytorch" and r.tensors == 2
    got = load_file(str(tmp_path / "m.safetensors"))
    assert np.array_equal(got["model.w"], state["model"]["w"].numpy())
    assert got["model.h"].dtype == ml_dtypes.bfloat16


class Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {os.environ.get('EVIL_MARK', '/nonexistent/x')}",))


def test_a_pickle_that_needs_more_than_weights_is_refused_unexecuted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mark = tmp_path / "executed"
    monkeypatch.setenv("EVIL_MARK", str(mark))
    torch.save({"w": torch.ones(2), "evil": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(UnsupportedError, match="pickle reader refuses"):
        convert(tmp_path / "evil.pt", tmp_path / "out.safetensors")
    run = _cli("convert", str(tmp_path / "evil.pt"), str(tmp_path / "out.safetensors"))
    assert run.returncode == 2 and "pickle reader refuses" in run.stderr
    assert not mark.exists() and not (tmp_path / "out.safetensors").exists()


def test_npz_and_npy_sources(tmp_path: Path) -> None:
    np.savez(tmp_path / "a.npz", w=np.arange(6.0).reshape(2, 3), b=np.ones(2, np.int32))
    np.save(tmp_path / "embed.npy", np.eye(3, dtype=np.float16))
    convert(tmp_path / "a.npz", tmp_path / "a.safetensors")
    assert sorted(load_file(str(tmp_path / "a.safetensors"))) == ["b", "w"]
    convert(tmp_path / "embed.npy", tmp_path / "e.zt")
    assert ztensor.load_file(tmp_path / "e.zt")["embed"].tolist() == np.eye(3).tolist()
    convert(tmp_path / "a.safetensors", tmp_path / "back.npz")
    with np.load(tmp_path / "back.npz") as back:
        assert np.array_equal(back["w"], np.arange(6.0).reshape(2, 3))
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(TensorFileError):
        convert(tmp_path / "obj.npy", tmp_path / "obj.safetensors")


def test_gguf_plain_and_quantized(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    f32 = rng.standard_normal((4, 64)).astype(np.float32)
    f16 = rng.standard_normal((2, 32)).astype(np.float16)
    q = gguf.quants.quantize(f32, gguf.GGMLQuantizationType.Q8_0)
    writer = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    writer.add_string("general.name", "tiny")
    writer.add_tensor("f32", f32)
    writer.add_tensor("f16", f16)
    writer.add_tensor("q", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    r = convert(tmp_path / "m.gguf", tmp_path / "m.safetensors")
    got = load_file(str(tmp_path / "m.safetensors"))
    assert np.array_equal(got["f32"], f32) and np.array_equal(got["f16"], f16)
    want = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0)
    assert got["q"].dtype == np.float32 and np.array_equal(got["q"], want)
    assert any("dequantized from q8_0" in n for n in r.notes)
    with safetensors.safe_open(str(tmp_path / "m.safetensors"), "np") as f:
        assert f.metadata()["general.name"] == "tiny"


def test_sparse_needs_densify_for_dense_only_formats(tmp_path: Path) -> None:
    dense = np.eye(4, dtype=np.float32)
    ztensor.save_file({"s": ztensor.CSRTensor.from_dense(dense)}, tmp_path / "s.zt")
    with pytest.raises(UnsupportedError, match="--densify"):
        convert(tmp_path / "s.zt", tmp_path / "s.safetensors")
    assert not (tmp_path / "s.safetensors").exists()
    r = convert(tmp_path / "s.zt", tmp_path / "s.safetensors", densify=True)
    assert r.densified == ("s",)
    assert np.array_equal(load_file(str(tmp_path / "s.safetensors"))["s"], dense)
    convert(tmp_path / "s.zt", tmp_path / "s2.zt", to="zt2")  # keeps the layout
    with ztensor.open(tmp_path / "s2.zt") as f:
        assert f.info("s").layout == "sparse_csr"
    assert content_hash(str(tmp_path / "s2.zt")) == content_hash(str(tmp_path / "s.safetensors"))


def test_sharded_output_loads_in_huggingface_hub(tmp_path: Path) -> None:
    from huggingface_hub import load_torch_model

    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 8))
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    save_file(state, str(tmp_path / "m.safetensors"))
    r = convert(tmp_path / "m.safetensors", tmp_path / "ck", shard_size="3KB")
    assert [Path(f).name for f in r.files][-1] == "model.safetensors.index.json"
    index = json.loads((tmp_path / "ck" / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == sum(a.nbytes for a in state.values())
    fresh = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 8))
    load_torch_model(fresh, tmp_path / "ck")
    for k, v in fresh.state_dict().items():
        assert np.array_equal(v.numpy(), state[k])
    assert content_hash(str(tmp_path / "ck")) == content_hash(str(tmp_path / "m.safetensors"))
    convert(tmp_path / "ck", tmp_path / "merged.safetensors")  # and back from the checkpoint
    want = content_hash(str(tmp_path / "m.safetensors"))
    assert content_hash(str(tmp_path / "merged.safetensors")) == want


@pytest.mark.parametrize(
    "args",
    [
        ["--to", "zt", "--checksum", "xxh3"],
        ["--to", "zt2", "--checksum", "crc32c"],
        ["--to", "safetensors", "--compression", "zstd"],
        ["--to", "zt", "--align", "4096"],
        ["--to", "nope"],
        ["--shard-size", "lots"],
    ],
)
def test_bad_options_exit_2_and_write_nothing(tmp_path: Path, args: list[str]) -> None:
    save_file({"w": np.ones(2, np.float32)}, str(tmp_path / "a.safetensors"))
    run = _cli("convert", str(tmp_path / "a.safetensors"), str(tmp_path / "out"), *args)
    assert run.returncode == 2 and run.stderr.startswith("tensorfile: error:")
    assert not (tmp_path / "out").exists()


def test_hostile_sources_and_destinations(tmp_path: Path) -> None:
    src = tmp_path / "a.safetensors"
    save_file({"w": np.ones(1000, np.float32)}, str(src))
    with pytest.raises(InvalidArgumentError, match="same file"):
        convert(src, src)
    (tmp_path / "cut.safetensors").write_bytes(src.read_bytes()[:-100])
    with pytest.raises(TensorFileError):
        convert(tmp_path / "cut.safetensors", tmp_path / "cut.zt")
    assert not (tmp_path / "cut.zt").exists()
    with pytest.raises(TensorFileError):
        convert(src, tmp_path / "no" / "such" / "dir" / "x.zt")
    (tmp_path / "junk.bin").write_bytes(b"\x80\x02not really a pickle")
    run = _cli("convert", str(tmp_path / "junk.bin"), str(tmp_path / "j.safetensors"))
    assert run.returncode == 2 and "Traceback" not in run.stderr


def test_sigkill_mid_convert_leaves_the_old_destination(tmp_path: Path) -> None:
    src = tmp_path / "big.safetensors"
    rng = np.random.default_rng(9)  # incompressible: zstd -19 takes seconds, the kills land in it
    save_file({f"t{i}": rng.random(1 << 20, np.float32) for i in range(24)}, str(src))
    dst = tmp_path / "out.zt"
    ztensor.save_file({"old": np.ones(3, np.float32)}, dst)
    before = dst.read_bytes()
    for delay in (0.3, 0.8, 1.5):
        proc = subprocess.Popen(
            [*CLI, "convert", str(src), str(dst), "--compression", "zstd", "--level", "19"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert dst.read_bytes() == before
        leftovers = [
            p.name for p in tmp_path.iterdir() if p.name not in {"big.safetensors", "out.zt"}
        ]
        assert all(".tmp" in n or n.startswith(".") for n in leftovers)
    assert ztensor.load_file(dst)["old"].tolist() == [1, 1, 1]


_DTYPES = [
    np.float32,
    np.float16,
    np.int8,
    np.int32,
    np.uint16,
    np.float64,
    np.bool_,
    ml_dtypes.bfloat16,
]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    shapes=st.lists(st.lists(st.integers(0, 5), max_size=3), min_size=1, max_size=4),
    kinds=st.lists(st.sampled_from(range(len(_DTYPES))), min_size=4, max_size=4),
    to=st.sampled_from(["zt", "zt2"]),
)
def test_round_trips_keep_values(
    tmp_path: Path, shapes: list[list[int]], kinds: list[int], to: str
) -> None:
    rng = np.random.default_rng(len(shapes))
    tensors = {}
    for i, shape in enumerate(shapes):
        dt = _DTYPES[kinds[i]]
        tensors[f"t{i}"] = (rng.random(shape) * 10).astype(dt)
    src = tmp_path / f"h-{to}.safetensors"
    save_file(tensors, str(src))
    convert(src, tmp_path / f"h.{to}.zt", to=to)
    convert(tmp_path / f"h.{to}.zt", tmp_path / f"h-{to}-back.safetensors")
    back = load_file(str(tmp_path / f"h-{to}-back.safetensors"))
    assert back.keys() == tensors.keys()
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape
        assert back[k].tobytes() == v.tobytes()


def test_an_npz_member_that_claims_more_than_it_holds_is_refused_unallocated(
    tmp_path: Path,
) -> None:
    import io
    import zipfile

    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        out, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)}
    )
    out.write(bytes(16))
    with zipfile.ZipFile(tmp_path / "lie.npz", "w") as zf:
        zf.writestr("w.npy", out.getvalue())
    with pytest.raises(TensorFileError, match="claims 4,000,000,000,000 bytes"):
        convert(tmp_path / "lie.npz", tmp_path / "lie.safetensors")
    run = _cli("convert", str(tmp_path / "lie.npz"), str(tmp_path / "lie.safetensors"))
    assert run.returncode == 2 and "claims" in run.stderr
    assert not (tmp_path / "lie.safetensors").exists()


def _gguf(path: Path, *, quantized: bool) -> np.ndarray:  # type: ignore[type-arg]
    f32 = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("tokens", [1, 2, 3])
    writer.add_tensor("f32", f32)
    writer.add_tensor("f16", f32[:2, :32].astype(np.float16))
    if quantized:
        q = gguf.quants.quantize(f32, gguf.GGMLQuantizationType.Q8_0)
        writer.add_tensor("q", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return f32


def test_unquantized_gguf_keeps_the_content_id(tmp_path: Path) -> None:
    f32 = _gguf(tmp_path / "m.gguf", quantized=False)
    want = content_hash(str(tmp_path / "m.gguf"))
    convert(tmp_path / "m.gguf", tmp_path / "m.safetensors")
    convert(tmp_path / "m.gguf", tmp_path / "m.zt", to="zt2")
    assert content_hash(str(tmp_path / "m.safetensors")) == want
    assert content_hash(str(tmp_path / "m.zt")) == want
    assert np.array_equal(safetensors.numpy.load_file(str(tmp_path / "m.safetensors"))["f32"], f32)


def test_quantized_gguf_without_the_gguf_package(tmp_path: Path) -> None:
    """Q8_0 (and the other simple block types) dequantize without the gguf package; a type
    tensorfile does not decode itself (Q6_K) is refused by name, saying what would do it."""
    f32 = _gguf(tmp_path / "q.gguf", quantized=True)
    want = gguf.quants.dequantize(
        gguf.quants.quantize(f32, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0
    )
    q6k = gguf.GGMLQuantizationType.Q6_K
    writer = gguf.GGUFWriter(str(tmp_path / "k.gguf"), "llama")
    writer.add_tensor("k", np.zeros((2, 210), np.uint8), raw_dtype=q6k)  # 2 rows of 256
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    code = (
        "import sys; sys.modules['gguf'] = None\n"  # an interpreter where gguf cannot be imported
        "from tensorfile.cli.app import main\n"
        f"assert main(['convert', {str(tmp_path / 'q.gguf')!r}, "
        f"{str(tmp_path / 'q.safetensors')!r}]) == 0\n"
        f"sys.exit(main(['convert', {str(tmp_path / 'k.gguf')!r}, "
        f"{str(tmp_path / 'k.safetensors')!r}]))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stderr
    assert np.array_equal(safetensors.numpy.load_file(str(tmp_path / "q.safetensors"))["q"], want)
    assert "'k' is quantized (Q6_K)" in run.stderr and "pip install gguf" in run.stderr
    assert "llama.cpp" in run.stderr
    assert not (tmp_path / "k.safetensors").exists()


def test_legacy_pickles_load_without_mmap(tmp_path: Path) -> None:
    state = {"w": torch.arange(6, dtype=torch.int32).reshape(2, 3)}
    torch.save(state, tmp_path / "old.pt", _use_new_zipfile_serialization=False)
    r = convert(tmp_path / "old.pt", tmp_path / "old.zt")
    assert r.source_format == "pytorch"
    assert zt1.Reader(str(tmp_path / "old.zt")).read_tensor("w").tolist() == [[0, 1, 2], [3, 4, 5]]


def test_zt2_attributes_stay_values_in_zt2_and_become_json_text_elsewhere(tmp_path: Path) -> None:
    attrs = {"epoch": 3, "cfg": {"a": [1, 2]}, "s": "x"}
    ztensor.save_file({"w": np.ones(2)}, tmp_path / "a.zt", version=2, attributes=attrs)
    convert(tmp_path / "a.zt", tmp_path / "b.zt", to="zt2")
    assert zt2.read(tmp_path / "b.zt")["attributes"] == attrs
    convert(tmp_path / "a.zt", tmp_path / "a.safetensors")
    with safetensors.safe_open(str(tmp_path / "a.safetensors"), "np") as f:
        assert f.metadata() == {"epoch": "3", "cfg": '{"a": [1, 2]}', "s": "x"}
    _gguf(tmp_path / "m.gguf", quantized=False)
    convert(tmp_path / "m.gguf", tmp_path / "g.zt", to="zt2")
    assert zt2.read(tmp_path / "g.zt")["attributes"]["tokens"] == [1, 2, 3]
