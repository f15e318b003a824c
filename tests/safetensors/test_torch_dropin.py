"""Code written for the reference runs unchanged on tensorfile.safetensors (torch)."""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest
import torch

from tensorfile.errors import InvalidArgumentError, SharedTensorsError

MODULES = ["safetensors", "tensorfile.safetensors"]


def _dtypes() -> list[torch.dtype]:
    names = ["float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32",
             "int64", "bool", "complex64", "uint16", "uint32", "uint64", "float8_e4m3fn",
             "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"]  # fmt: skip
    return [getattr(torch, n) for n in names if hasattr(torch, n)]


def _tensor(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (max(1, int(torch.tensor(shape).prod().item())) * 8,),
                        generator=g, dtype=torch.uint8)  # fmt: skip
    if dtype == torch.bool:
        return (raw[: int(torch.tensor(shape).prod().item())] % 2).bool().reshape(shape)
    size = torch.empty((), dtype=dtype).element_size()
    n = int(torch.tensor(shape).prod().item())
    return raw[: n * size].view(dtype).reshape(shape).clone()


def _same(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert (
        a.contiguous().view(-1).view(torch.uint8).tolist()
        == (b.contiguous().view(-1).view(torch.uint8).tolist())
        if a.numel()
        else True
    )


def _user_code(mod: str, path: str) -> dict[str, Any]:
    """Typical reference-style code; only the module name changes."""
    st = importlib.import_module(mod)
    st_torch = importlib.import_module(mod + ".torch")
    tensors = {f"t.{i}": _tensor(dt, (3, 4), i) for i, dt in enumerate(_dtypes())}
    tensors["scalar"] = torch.tensor(1.5)
    tensors["empty"] = torch.zeros((0, 5), dtype=torch.bfloat16)
    st_torch.save_file(tensors, path, metadata={"format": "pt"})
    loaded = st_torch.load_file(path)
    with st.safe_open(path, framework="pt", device="cpu") as f:
        keys = f.keys()
        meta = f.metadata()
        one = f.get_tensor("t.0")
        part = f.get_slice("t.0")[1:, ::2]
        shape = f.get_slice("t.2").get_shape()
    blob = st_torch.save(tensors)
    # the reference's load(bytes) has no F8_E8M0 in its table (load_file does)
    e8m0 = getattr(torch, "float8_e8m0fnu", None)
    from_bytes = st_torch.load(st_torch.save({k: v for k, v in tensors.items() if v.dtype != e8m0}))
    return {
        "tensors": tensors, "loaded": loaded, "keys": keys, "meta": meta, "one": one,
        "part": part, "shape": shape, "bytes": blob, "from_bytes": from_bytes,
    }  # fmt: skip


def test_same_user_code_same_results(tmp_path: Any) -> None:
    ref = _user_code("safetensors", str(tmp_path / "ref.safetensors"))
    ours = _user_code("tensorfile.safetensors", str(tmp_path / "ours.safetensors"))
    assert ours["bytes"] == ref["bytes"]
    ours_file = (tmp_path / "ours.safetensors").read_bytes()
    assert ours_file == (tmp_path / "ref.safetensors").read_bytes()
    assert ours["keys"] == ref["keys"]
    assert ours["meta"] == ref["meta"]
    assert ours["shape"] == ref["shape"]
    _same(ours["one"], ref["one"])
    _same(ours["part"], ref["part"])
    assert list(ours["loaded"]) == list(ref["loaded"])
    for name, t in ref["tensors"].items():
        _same(ours["loaded"][name], t)
        _same(ours["loaded"][name], ref["loaded"][name])
        if name in ref["from_bytes"]:
            _same(ours["from_bytes"][name], ref["from_bytes"][name])
    from tensorfile.safetensors.torch import load

    for name, t in load(ours["bytes"]).items():
        _same(t, ref["tensors"][name])


def test_float4_round_trip(tmp_path: Any) -> None:
    from tensorfile.safetensors import safe_open
    from tensorfile.safetensors.torch import load_file, save_file

    t = torch.randint(0, 256, (4, 3), dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    path = str(tmp_path / "f4.safetensors")
    save_file({"w": t}, path)
    with safe_open(path, "np") as f:
        assert f.get_slice("w").get_shape() == [4, 6]  # logical F4 elements
        assert f.get_slice("w").get_dtype() == "F4"
    back = load_file(path)["w"]
    assert back.dtype == torch.float4_e2m1fn_x2 and back.shape == (4, 3)
    assert back.view(torch.uint8).tolist() == t.view(torch.uint8).tolist()
    import safetensors.torch as ref

    assert ref.load_file(path)["w"].view(torch.uint8).tolist() == t.view(torch.uint8).tolist()


class _Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)
        self.b.weight = self.a.weight


@pytest.mark.parametrize("mod", MODULES)
def test_save_model_load_model_with_tied_weights(tmp_path: Any, mod: str) -> None:
    st_torch = importlib.import_module(mod + ".torch")
    model = _Tied()
    path = str(tmp_path / "m.safetensors")
    st_torch.save_model(model, path)
    fresh = _Tied()
    missing, unexpected = st_torch.load_model(fresh, path)
    assert (set(missing), list(unexpected)) == (set(), [])
    assert torch.equal(fresh.a.weight, model.a.weight)
    assert fresh.b.weight is fresh.a.weight
    with pytest.raises(RuntimeError, match="share memory"):
        st_torch.save_file(model.state_dict(), path)


def test_save_model_output_equals_reference(tmp_path: Any) -> None:
    import safetensors.torch as ref

    from tensorfile.safetensors import torch as ours

    model = _Tied()
    ref.save_model(model, str(tmp_path / "ref.safetensors"))
    ours.save_model(model, str(tmp_path / "ours.safetensors"))
    assert (tmp_path / "ref.safetensors").read_bytes() == (
        tmp_path / "ours.safetensors"
    ).read_bytes()
    assert isinstance(SharedTensorsError("x"), RuntimeError)


def test_storage_helpers_match_reference() -> None:
    import safetensors.torch as ref

    from tensorfile.safetensors import torch as ours

    t = torch.arange(10, dtype=torch.float32)[2:]
    assert ours.storage_ptr(t) == ref.storage_ptr(t)
    assert ours.storage_size(t) == ref.storage_size(t) == 40


def test_non_contiguous_tensors_are_refused_as_the_reference_does(tmp_path: Any) -> None:
    import safetensors.torch as ref

    from tensorfile.safetensors.torch import save, save_file

    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
    path = str(tmp_path / "t.safetensors")
    with pytest.raises(ValueError) as theirs:
        ref.save({"t": t})
    for call in (lambda: save({"t": t}), lambda: save_file({"t": t}, path)):
        with pytest.raises(InvalidArgumentError) as ours:
            call()
        assert str(ours.value) == str(theirs.value)
    assert not os.path.exists(path)
    save_file({"t": t.contiguous()}, path)  # what the message advises


def test_zero_copy_torch_load(tmp_path: Any) -> None:
    from tensorfile.safetensors.torch import load_file, save_file

    tensors = {"w": torch.randn(64, 64), "h": torch.randn(8).to(torch.bfloat16)}
    path = str(tmp_path / "z.safetensors")
    save_file(tensors, path)
    lazy = load_file(path, copy=False)
    for name, t in tensors.items():
        assert torch.equal(lazy[name], t)
    lazy["w"][0, 0] = 123.0  # private mapping: the file is not changed
    assert load_file(path)["w"][0, 0] == tensors["w"][0, 0]
