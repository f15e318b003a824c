"""The plain values of a PyTorch pickle (what is not a tensor) however they are built: lists
and dicts that hold themselves or are shared are read in time bounded by the pickle, a big
list of numbers costs about what ``torch.load`` spends on it, and what a metadata value
cannot keep as it is (two keys with one text, a lone surrogate) is noted, not dropped. What
memo references make of a few bytes (a long key under itself at every level, one list or
text in every entry) is bounded by the file's size: names and text past a budget are
refused, repeats named briefly (review35h h05, h06, h08, h09)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open as ref_safe_open

import tensorfile
from tensorfile.errors import FormatError
from tests.formats.limits import GIB, OPEN_SAYS, run_limited

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


def _nested_under_one_key(path: Path, key: str, depth: int) -> Path:
    """``depth`` dicts nested under one key, each beside one tensor: the key and the tensor
    are one object each, so the pickle holds them once and refers to them at every level."""
    t = torch.zeros(2)
    nest: dict[str, Any] = {"t": t}
    for _ in range(depth):
        nest = {key: nest, "t": t}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * depth))  # (the pickler recurses; torch.load does not)
    try:
        torch.save(nest, path)
    finally:
        sys.setrecursionlimit(limit)
    return path


def test_names_nested_under_one_long_key_are_refused_past_a_budget(tmp_path: Path) -> None:
    """h05: 1,500 dicts nested under one 4 KiB key flatten to 1,500 tensor names of up to
    6 MB each, 4.6 GB in all, from a file of under 100 kB: refused once the names pass the
    file's budget of characters, under a 3 GiB address space."""
    path = _nested_under_one_key(tmp_path / "deep.pt", "k" * 4096, 1500)
    assert path.stat().st_size < 100_000
    printed, _peak = run_limited(OPEN_SAYS.format(path=str(path)), address_space=3 * GIB)
    said = (
        r"FormatError the pickle's flattened names take more than [\d,]+ characters "
        r"\(tensorfile's limit: 16 for each of its [\d,]+ bytes and 33,554,432 more\)"
    )
    assert re.match(said, printed), printed


def test_a_repeat_first_rendered_under_a_long_key_is_named_briefly(tmp_path: Path) -> None:
    """h06: each repeat of a list first rendered under a 64 KiB key was a text quoting the
    whole name, 64 KiB for each 5-byte reference; now the name is cut (and each repeat
    counts against the file's budget of text)."""
    numbers = [1] * 200_000  # (more than the budget renders twice)
    path = tmp_path / "same.pt"
    torch.save({"w": torch.zeros(2), "x": {"k" * 65536: numbers, "r": [numbers] * 1000}}, path)
    with tensorfile.open(path) as f:
        repeats = f.attributes["x"]["r"]
        text = f.metadata["x"]
    assert len(repeats) == 1000 and len(set(repeats)) == 1
    assert repeats[0].startswith("(the same object as 'x.kkkk") and len(repeats[0]) < 200
    assert len(text) < 4 * path.stat().st_size


def test_a_long_text_referred_to_over_and_over_is_refused_past_a_budget(tmp_path: Path) -> None:
    """One 64 KiB text in a list 2,000 times (a reference of a few bytes each) was 131 MB
    of metadata from a 70 kB file: refused once the text passes the file's budget."""
    path = tmp_path / "texts.pt"
    torch.save({"w": torch.zeros(2), "s": ["x" * 65536] * 2000}, path)
    said = r"the pickle's plain values, as JSON text, take more than [\d,]+ characters"
    with pytest.raises(FormatError, match=said):
        tensorfile.open(path)


def test_a_list_referred_to_over_and_over_is_looked_into_once(tmp_path: Path) -> None:
    """h08: whether a container leads to a tensor was asked of a list of M numbers once for
    each of its R references (R * M = 4e10 steps here: hours); now once. (The child's
    timeout only guards against a hang: it reads in seconds.)"""
    numbers = [1] * 200_000
    path = tmp_path / "refs.pt"
    torch.save({"w": torch.zeros(2), "x": [numbers] * 200_000}, path)
    keys, attributes, described = _open_in_child(path)
    assert keys == ["w"] and described == {"x": "list of 200,000 lists"}
    assert attributes["x"][0] == numbers
    assert attributes["x"][-1] == "(the same object as 'x.0')"


def test_a_list_in_every_entry_is_rendered_once_for_the_file(tmp_path: Path) -> None:
    """h09: a list of 200,000 numbers in 100 top-level entries was rendered whole for each
    (each entry had a budget of its own); one budget for the file now: the first entry
    holds it, the others name it."""
    numbers = [1] * 200_000
    path = tmp_path / "shared.pt"
    torch.save({"w": torch.zeros(2), **{f"a{i}": numbers for i in range(100)}}, path)
    with tensorfile.open(path) as f:
        values = f.attributes
        described = f.catalog.extra["not_tensors"]
    assert values["a0"] == numbers
    assert all(values[f"a{i}"] == "(the same object as 'a0')" for i in range(1, 100))
    assert set(described.values()) == {"list of 200,000 ints"}


def test_bytes_and_storages_as_keys_or_values_are_shown_briefly(tmp_path: Path) -> None:
    """i06: a key that is no text was written out whole before it was cut (one 1 MiB bytes
    key shared by R dicts: R MiB of repr; a storage's repr writes each element in Python,
    ~10 us each), and a storage as a value was ``str()``'d whole. Now a key is cut before
    its repr is made and a storage is its type and size (60 s: trips only on a hang)."""
    key = b"\x01" * (1 << 20)
    storage = torch.zeros(1 << 16, dtype=torch.uint8).untyped_storage()
    path = tmp_path / "keys.pth"
    shared = [{key: i} for i in range(2_000)]
    torch.save({"model": {"w": torch.ones(2)}, "k": shared, "v": storage}, path)
    keys, attributes, _ = _open_in_child(path)
    assert keys == ["model.w", "v"]  # (a bare storage: its bytes, as torch.load gives them)
    shown = {text for d in attributes["k"] for text in d}
    assert len(shown) == 1 and len(text := shown.pop()) == 100 and text.startswith("b'\\x01")
    # (a storage as a dict key is refused: see test_pickle_reader's keys tests)
