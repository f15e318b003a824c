"""Training checkpoints (``torch.save`` of a model's and an optimizer's state dicts beside plain
values: epoch, a metric, a vocabulary, None, text, lists) are read: their tensors by dotted
name, the rest as metadata, reported as "not tensors"; ``key=`` reads one dictionary of
them. ``torch.load(weights_only=True)`` is the oracle for every value."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors import safe_open as ref_safe_open
from safetensors.torch import load_file as ref_load_file

import tensorfile
from tensorfile.errors import InvalidArgumentError, UnsupportedError

CHARS = "\tabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:!?'\"-()[]{}/\\@#"


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3),
        torch.nn.BatchNorm2d(4),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 5),
    )


def _checkpoint(path: Path) -> torch.nn.Module:
    """A real training checkpoint: a model after one optimizer step, and the plain values
    a training script saves beside it."""
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(2, 1, 4, 4)).sum().backward()
    opt.step()
    torch.save(
        {
            "model_state_dict": model.state_dict(),
            "optimizer_state_dict": opt.state_dict(),
            "epoch": 7,
            "cer": 0.0831,
            "char2idx": {c: i for i, c in enumerate(CHARS)},
            "history": [0.5, 0.25, 0.125],
            "best": None,
            "arch": "crnn-small",
        },
        path,
    )
    return model


def _flat(obj: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    """The oracle's tensors by dotted name (dicts only: what this checkpoint nests)."""
    out: dict[str, torch.Tensor] = {}
    for k, v in obj.items():
        name = f"{prefix}{k}"
        if isinstance(v, torch.Tensor):
            out[name] = v
        elif isinstance(v, dict) and any(isinstance(x, torch.Tensor | dict) for x in v.values()):
            out.update(_flat(v, name + "."))
    return out


def test_a_training_checkpoint_reads_its_tensors_and_keeps_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "train.pth"
    _checkpoint(path)
    oracle = torch.load(path, weights_only=True)
    want = _flat(oracle)
    assert "optimizer_state_dict.state.0.exp_avg" in want  # int keys: dotted like text
    with tensorfile.open(path) as f:
        assert sorted(f.keys()) == sorted(want)
        for name, t in want.items():
            assert np.array_equal(f.get_tensor(name), t.numpy()), name
        # the entries that are not tensors: values as torch.load gave them (tuples as lists)
        attrs = f.attributes
        assert attrs["epoch"] == 7 and attrs["cer"] == oracle["cer"]
        assert attrs["char2idx"] == oracle["char2idx"] and attrs["char2idx"]["\t"] == 0
        assert attrs["history"] == [0.5, 0.25, 0.125] and attrs["best"] is None
        assert attrs["arch"] == "crnn-small"
        groups = oracle["optimizer_state_dict"]["param_groups"]
        assert attrs["optimizer_state_dict.param_groups"] == json.loads(json.dumps(groups))
        # metadata is text, as for every format whose metadata is text
        assert f.metadata["epoch"] == "7" and f.metadata["arch"] == "crnn-small"
        assert json.loads(f.metadata["char2idx"]) == oracle["char2idx"]
        described = f.catalog.extra["not_tensors"]
    assert described == {
        "optimizer_state_dict.param_groups": "list of 1 dict",
        "epoch": "int",
        "cer": "float",
        "char2idx": f"dict of {len(CHARS)} ints",
        "history": "list of 3 floats",
        "best": "None",
        "arch": "str",
    }


def test_key_reads_the_model_state_dict_as_load_state_dict_wants_it(tmp_path: Path) -> None:
    path = tmp_path / "train.pth"
    model = _checkpoint(path)
    with tensorfile.open(path, key="model_state_dict") as f:
        assert sorted(f.keys()) == sorted(model.state_dict())
        assert f.metadata == {}
    dst = tmp_path / "model.safetensors"
    r = tensorfile.convert(path, dst, key="model_state_dict")
    assert r.tensors == len(model.state_dict()) and not r.notes
    fresh = _model()
    for p in fresh.parameters():
        torch.nn.init.zeros_(p)
    fresh.load_state_dict(ref_load_file(str(dst)), strict=True)  # the reference reads it
    for name, t in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], t), name
    # a nested dictionary by its dotted name
    with tensorfile.open(path, key="optimizer_state_dict.state") as f:
        assert "0.exp_avg" in f.keys()


def test_convert_keeps_plain_values_as_metadata_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "train.pth"
    _checkpoint(path)
    oracle = torch.load(path, weights_only=True)
    r = tensorfile.convert(path, tmp_path / "all.safetensors")
    assert r.tensors == len(_flat(oracle))
    (note,) = [n for n in r.notes if n.startswith("not tensors")]
    assert note.startswith("not tensors, kept as metadata, as JSON text: ")
    assert "epoch (int)" in note and f"char2idx (dict of {len(CHARS)} ints)" in note
    with ref_safe_open(str(tmp_path / "all.safetensors"), "np") as f:
        meta = f.metadata()
    assert meta["epoch"] == "7" and meta["arch"] == "crnn-small" and meta["best"] == "null"
    assert json.loads(meta["char2idx"]) == oracle["char2idx"]
    assert json.loads(meta["cer"]) == oracle["cer"]
    # zTensor v2 keeps the values themselves
    tensorfile.convert(path, tmp_path / "all.zt", to="zt2")
    with tensorfile.open(tmp_path / "all.zt") as f:
        assert f.attributes["char2idx"] == oracle["char2idx"] and f.attributes["epoch"] == 7
    # npz holds no metadata: the note says they are not kept
    r = tensorfile.convert(path, tmp_path / "all.npz")
    assert any(n.startswith("not tensors, not kept (npz holds no metadata)") for n in r.notes)


def test_key_errors_say_what_can_be_picked(tmp_path: Path) -> None:
    path = tmp_path / "train.pth"
    _checkpoint(path)
    with pytest.raises(InvalidArgumentError, match=r"no key 'model'.*'model_state_dict'"):
        tensorfile.open(path, key="model")
    with pytest.raises(InvalidArgumentError, match=r"key 'epoch' holds no tensors \(int\)"):
        tensorfile.open(path, key="epoch")
    with pytest.raises(InvalidArgumentError, match="is a tensor, not a dictionary"):
        tensorfile.open(path, key="model_state_dict.0.weight")
    tensorfile.convert(path, tmp_path / "m.safetensors", key="model_state_dict")
    with pytest.raises(InvalidArgumentError, match="this is a safetensors file"):
        tensorfile.open(tmp_path / "m.safetensors", key="model_state_dict")


def test_names_in_messages_are_quoted_with_escapes(tmp_path: Path) -> None:
    """A name holding a tab is shown as ``'\\t'`` (repr-style), never as a raw tab."""
    path = tmp_path / "tab.pt"
    torch.save({"a\tb": {"w": torch.ones(1)}, "a\tb.w": torch.zeros(1)}, path)
    with pytest.raises(UnsupportedError) as caught:
        tensorfile.open(path)
    message = str(caught.value)
    assert "'a\\tb.w'" in message and "\t" not in message
    torch.save({"m\t": {"w": torch.ones(1)}}, tmp_path / "ok.pt")
    with pytest.raises(InvalidArgumentError) as caught_key:
        tensorfile.open(tmp_path / "ok.pt", key="x\ty")
    assert "'x\\ty'" in str(caught_key.value) and "'m\\t'" in str(caught_key.value)
    assert "\t" not in str(caught_key.value)


class Tokenizer:
    """Not a plain value: a pickle holding one must be refused without running it."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_a_checkpoint_with_an_object_is_refused_unexecuted(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    path = tmp_path / "obj.pth"
    torch.save(
        {"model_state_dict": _model().state_dict(), "epoch": 1, "tok": Tokenizer(str(marker))},
        path,
    )
    for call in (
        lambda: tensorfile.open(path),
        lambda: tensorfile.open(path, key="model_state_dict"),
        lambda: tensorfile.inspect(str(path)),
        lambda: tensorfile.convert(path, tmp_path / "o.safetensors"),
    ):
        with pytest.raises(UnsupportedError, match=r"names posix\.system, which tensorfile's"):
            call()
    assert not marker.exists() and not (tmp_path / "o.safetensors").exists()


def test_lists_of_tensors_and_top_level_values(tmp_path: Path) -> None:
    torch.save(
        {"layers": [torch.ones(2), torch.zeros(3)], "meta": {"k": (1, 2)}}, tmp_path / "l.pt"
    )
    with tensorfile.open(tmp_path / "l.pt") as f:
        assert f.keys() == ["layers.0", "layers.1"]
        assert f.attributes == {"meta": {"k": [1, 2]}}
    torch.save({"epoch": 3, "note": b"\x00raw"}, tmp_path / "plain.pt")  # no tensor at all
    with tensorfile.open(tmp_path / "plain.pt") as f:
        assert f.keys() == [] and f.attributes == {"epoch": 3, "note": "b'\\x00raw'"}


def test_shared_and_self_holding_containers(tmp_path: Path) -> None:
    """A dict shared by two entries is read under both names; a list that holds itself is,
    inside itself, a text naming it; a pickle of a dict referred to twice at every level
    (2**40 entries in a few kB) is refused, not walked."""
    t = torch.ones(2)
    shared = {"w": t}
    loop: list[Any] = [t]
    loop.append(loop)
    torch.save({"a": shared, "b": shared, "loop": loop}, tmp_path / "s.pt")
    with tensorfile.open(tmp_path / "s.pt") as f:
        assert f.keys() == ["a.w", "b.w", "loop.0"]
        assert f.attributes == {"loop.1": "(the same object as 'loop')"}
    bomb: dict[str, Any] = {"w": t}
    for _ in range(40):
        bomb = {"a": bomb, "b": bomb}
    torch.save(bomb, tmp_path / "bomb.pt")
    with pytest.raises(UnsupportedError, match="flattens to more than"):
        tensorfile.open(tmp_path / "bomb.pt")


def test_a_file_name_with_control_characters_is_quoted(tmp_path: Path) -> None:
    path = tmp_path / "evil\n\x1b[31m.pt"
    torch.save({"m\t": {"w": torch.ones(1)}}, path)
    for key in ("x", "", "m\t.w"):
        with pytest.raises(InvalidArgumentError) as caught:
            tensorfile.open(path, key=key)
        message = str(caught.value)
        assert message.startswith(f"{str(path)!r}: "), message
        assert "\n" not in message and "\x1b" not in message
