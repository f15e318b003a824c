"""The plain values of a PyTorch pickle (what is not a tensor) however they are built: lists
and dicts that hold themselves or are shared are read in time bounded by the pickle, a big
list of numbers costs about what ``torch.load`` spends on it, and what a metadata value
cannot keep as it is (two keys with one text, a lone surrogate) is noted, not dropped."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open as ref_safe_open

import tensorfile

_OPEN = """
import json, sys, tensorfile
with tensorfile.open(sys.argv[1]) as f:
    print(json.dumps([f.keys(), f.attributes, f.catalog.extra["not_tensors"]]))
"""


def _open_in_child(path: Path) -> Any:
    """What ``tensorfile.open`` reads, in a child process (60 s: trips only on a hang)."""
    proc = subprocess.run(
        [sys.executable, "-c", _OPEN, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(proc.stdout)


def test_plain_values_that_hold_themselves_several_times(tmp_path: Path) -> None:
    """A list that holds itself three times (3**64 paths to depth 64) and a dict whose two
    keys both hold it: each is read once, a repeat inside itself is a text naming it."""
    loop: list[Any] = []
    loop.extend([loop, loop, loop])
    both: dict[str, Any] = {}
    both.update(x=both, y=both)
    path = tmp_path / "cyc.pth"
    torch.save({"model": {"w": torch.ones(2)}, "c": loop, "d": both}, path)
    keys, attributes, described = _open_in_child(path)
    assert keys == ["model.w"]
    assert attributes["c"] == ["(the same object as 'c')"] * 3
    assert attributes["d"] == {"x": "(the same object as 'd')", "y": "(the same object as 'd')"}
    assert described == {"c": "list of 3 lists", "d": "dict of 2 dicts"}
    r = tensorfile.convert(path, tmp_path / "cyc.safetensors")
    assert r.tensors == 1
    with ref_safe_open(str(tmp_path / "cyc.safetensors"), "np") as f:
        assert json.loads(f.metadata()["c"]) == attributes["c"]


def test_a_plain_value_shared_at_every_level_is_rendered_within_a_budget(
    tmp_path: Path,
) -> None:
    """A list that holds one list three times, 100 levels deep (3**100 paths, no cycle):
    read, its repeats rendered while a budget lasts and named after it."""
    chain: list[Any] = [1]
    for _ in range(100):
        chain = [chain, chain, chain]
    path = tmp_path / "dag.pth"
    torch.save({"model": {"w": torch.ones(2)}, "e": chain}, path)
    keys, attributes, described = _open_in_child(path)
    assert keys == ["model.w"] and described == {"e": "list of 3 lists"}
    text = json.dumps(attributes["e"])
    assert "(the same object as 'e.0.0" in text and len(text) < 50_000_000


def _peak_kb(call: Callable[[], object]) -> int:
    """The most memory Python objects took during ``call()`` (tracemalloc: exact, not the
    process's resident size, which moves with the host)."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1] // 1024
    finally:
        tracemalloc.stop()


def test_a_big_list_of_plain_values_costs_about_what_torch_load_does(tmp_path: Path) -> None:
    """300,000 numbers and one nested list beside a tensor: one metadata value, read in a
    small multiple of the memory torch.load needs for it (not an entry per number)."""
    path = tmp_path / "mixed.pth"
    torch.save({"model": {"w": torch.ones(2)}, "h": [7] * 300_000 + [[1]]}, path)
    torch.save({"model": {"w": torch.ones(2)}, "h": [[1]]}, tmp_path / "warm.pth")
    tensorfile.open(tmp_path / "warm.pth").close()  # (the modules it imports once)
    with tensorfile.open(path) as f:
        assert f.keys() == ["model.w"] and list(f.metadata) == ["h"]
        assert f.catalog.extra["not_tensors"] == {"h": "list of 300,001 values"}
        assert f.attributes["h"][-2:] == [7, [1]]
    torch_kb = _peak_kb(lambda: torch.load(path, weights_only=True, mmap=True))
    ours_kb = _peak_kb(lambda: tensorfile.open(path).close())
    assert ours_kb < 4 * torch_kb, (ours_kb, torch_kb)


def test_keys_that_clash_as_text_are_noted(tmp_path: Path) -> None:
    path = tmp_path / "clash.pth"
    plain = {0: "int", "0": "str", None: "n", "None": "s"}
    torch.save({"model": {"w": torch.ones(2)}, "m": plain}, path)
    with tensorfile.open(path) as f:
        assert f.attributes["m"] == {"0": "int", "None": "n"}  # the first of each kept
        described = f.catalog.extra["not_tensors"]["m"]
    assert described.startswith("dict of 4 strs (")
    assert "keys 0 and '0' are both '0' as text" in described
    assert "keys None and 'None' are both 'None' as text" in described
    r = tensorfile.convert(path, tmp_path / "clash.safetensors")
    assert any("keys 0 and '0'" in note for note in r.notes)


def test_a_lone_surrogate_in_a_value_is_kept_escaped(tmp_path: Path) -> None:
    """UTF-8 cannot hold "ok\\ud800bad" (a pickle can): the value is written escaped, noted,
    and the rest of the conversion goes on."""
    path = tmp_path / "surr.pth"
    torch.save({"model": {"w": torch.ones(2)}, "s": "ok\ud800bad", "l": ["\udfff"]}, path)
    r = tensorfile.convert(path, tmp_path / "surr.safetensors")
    assert r.tensors == 1
    assert any("a lone surrogate in 'ok\\ud800bad', kept escaped" in note for note in r.notes)
    with ref_safe_open(str(tmp_path / "surr.safetensors"), "np") as f:
        meta = f.metadata()
        assert f.keys() == ["model.w"]
    assert meta["s"] == "ok\\ud800bad" and json.loads(meta["l"]) == ["\\udfff"]
