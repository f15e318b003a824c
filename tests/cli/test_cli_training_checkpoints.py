"""``inspect``, ``summary`` and ``convert`` of a training checkpoint (a model's and an
optimizer's state dicts beside epoch, a metric and a vocabulary): the tensors are read, the
other entries listed as "not tensors", and ``--key`` picks one dictionary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file as ref_load_file

from tests.formats.test_training_checkpoints import CHARS, _checkpoint, _flat
from tests.helpers.cli import assert_one_error, run, run_json


def test_inspect_and_summary_list_what_is_not_a_tensor(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "train.pth"
    _checkpoint(path)
    want = _flat(torch.load(path, weights_only=True))
    r = run(capsys, "inspect", path)
    assert r.code == 0 and r.err == "", r
    line = next(x for x in r.out.splitlines() if x.startswith("not tensors"))
    assert line.startswith("not tensors (7, kept as metadata): ")
    assert "epoch (int)" in line and "cer (float)" in line
    assert f"char2idx (dict of {len(CHARS)} ints)" in line
    assert 'char2idx: {"\\t": 0' in r.out  # the tab key shown escaped, as JSON has it
    doc = run_json(capsys, "inspect", path)
    assert doc["tensor_count"] == len(want) and doc["not_tensors"]["best"] == "None"
    assert doc["metadata"]["epoch"] == "7"
    summary = run_json(capsys, "summary", path)
    assert summary["tensor_count"] == len(want) and summary["not_tensor_count"] == 7
    keyed = run_json(capsys, "summary", path, "--key", "model_state_dict")
    assert keyed["metadata_count"] == 0 and "not_tensor_count" not in keyed


def test_convert_with_key_writes_the_model_only(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "train.pth"
    model = _checkpoint(path)
    dst = tmp_path / "model.safetensors"
    r = run(capsys, "convert", path, dst, "--key", "model_state_dict")
    assert r.code == 0 and "note:" not in r.out, r
    got = ref_load_file(str(dst))
    assert sorted(got) == sorted(model.state_dict())
    r = run(capsys, "convert", path, tmp_path / "all.safetensors")
    assert r.code == 0 and "note: not tensors, kept as metadata, as JSON text: " in r.out, r
    doc = run_json(capsys, "convert", path, tmp_path / "all.npz")
    assert any("not kept (npz holds no metadata)" in n for n in doc["notes"])


def test_key_mistakes_are_one_error_line(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "train.pth"
    _checkpoint(path)
    message = assert_one_error(run(capsys, "inspect", path, "--key", "model"))
    assert "no key 'model'" in message and "'model_state_dict'" in message
    message = assert_one_error(run(capsys, "convert", path, tmp_path / "o.zt", "--key", "cer"))
    assert "key 'cer' holds no tensors (float)" in message
    assert not (tmp_path / "o.zt").exists()
    run(capsys, "convert", path, tmp_path / "m.safetensors", "--key", "model_state_dict")
    message = assert_one_error(
        run(capsys, "inspect", tmp_path / "m.safetensors", "--key", "model_state_dict")
    )
    assert "this is a safetensors file" in message


def test_an_empty_key_says_it_names_no_dictionary(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "train.pth"
    _checkpoint(path)
    for argv in (["inspect", path], ["convert", path, tmp_path / "o.safetensors"]):
        message = assert_one_error(run(capsys, *argv, "--key", ""))
        assert "key='' names no dictionary: give a dotted name" in message, message
        assert "this is a PyTorch pickle file" not in message
    assert not (tmp_path / "o.safetensors").exists()
