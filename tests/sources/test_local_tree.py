"""The local store's tree removal (:mod:`tensorfile.sources.local.tree`, shared with the
cache's healing) on trees deeper than Python's recursion limit: removed whole, without
recursion, nothing followed."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from tensorfile.sources.local import tree


def test_a_tree_deeper_than_the_recursion_limit_is_removed(
    tmp_path: Path, deep: Callable[..., None]
) -> None:
    # review 35 j09: the removal recursed once per level (and held a descriptor per level):
    # a RecursionError out of `tensorfile dataset gc`
    root = tmp_path / "store"
    (root / "_staging").mkdir(parents=True)
    deep(root / "_staging" / "job")
    (root / "keep").write_text("keep")
    tree.remove_tree(str(root), "_staging/job")
    assert sorted(os.listdir(root)) == ["_staging", "keep"]
    assert os.listdir(root / "_staging") == []


def test_a_symlink_deep_in_the_tree_is_unlinked_not_followed(
    tmp_path: Path, deep: Callable[..., None]
) -> None:
    outside = tmp_path / "outside"
    (outside / "d").mkdir(parents=True)
    (outside / "d" / "precious").write_text("precious")
    deep(tmp_path / "tree", 200)
    bottom = tmp_path / "tree" / Path(*["d"] * 200)
    (bottom / "link").symlink_to(outside)
    (bottom / "d").symlink_to(outside / "d")  # (named like the levels moved up)
    tree.remove_tree(str(tmp_path), "tree")
    assert sorted(os.listdir(tmp_path)) == ["outside"]
    assert (outside / "d" / "precious").read_text() == "precious"
