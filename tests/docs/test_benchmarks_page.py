"""The benchmarks page's generator (docs/hooks/benchmarks.py): every committed runner JSON
renders into tables, every placeholder of the page has its JSON, and a missing one fails
the build instead of rendering an empty table."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "docs" / "benchmarks"
PAGE = REPO / "docs" / "benchmarks.md"
ISSUE = re.compile(r"\bissues?\s+#?\d+|\(#\d+\)|\bissue-\d+", re.IGNORECASE)


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "docs_hooks_benchmarks", REPO / "docs" / "hooks" / "benchmarks.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


hook = _hook()
GROUPS = sorted(p.stem for p in DATA.glob("*.json"))
PLACED = hook.PLACEHOLDER.findall(PAGE.read_text(encoding="utf-8"))


def test_the_page_places_tables() -> None:
    assert len(PLACED) >= 5
    assert len(PLACED) == len(set(PLACED))


@pytest.mark.parametrize("group", GROUPS)
def test_every_committed_json_renders_tables(group: str) -> None:
    out = hook.render_group(group)
    assert re.search(r"^\|---", out, re.MULTILINE), out[:500]
    assert "Measured on" in out
    assert not ISSUE.search(out), ISSUE.search(out)
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert len(rows) >= 2  # a head and at least one measurement


@pytest.mark.parametrize("group", [g for g in PLACED if g not in hook.OPTIONAL])
def test_every_placeholder_has_its_json(group: str) -> None:
    assert (DATA / f"{group}.json").is_file(), f"docs/benchmarks/{group}.json is not committed"


def test_a_missing_group_fails_loudly(tmp_path: Path) -> None:
    with pytest.raises(hook.MissingBenchmarks, match=r"nothing\.json is missing"):
        hook.render_group("nothing", tmp_path)
    with pytest.raises(FileNotFoundError):  # MissingBenchmarks is one
        hook.on_page_markdown("# t\n\n<!-- benchmarks: nothing -->\n", page=None)


def test_an_unreadable_or_empty_json_fails_loudly(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(hook.MissingBenchmarks, match="cannot be rendered"):
        hook.render_group("broken", tmp_path)
    (tmp_path / "empty.json").write_text(json.dumps({"machine": {}, "results": []}))
    with pytest.raises(hook.MissingBenchmarks, match="no results"):
        hook.render_group("empty", tmp_path)


def test_a_missing_gpu_table_is_a_note(tmp_path: Path) -> None:
    assert "Not measured in this build" in hook.render_group("gpu", tmp_path)


def test_placeholders_are_replaced_in_place() -> None:
    group = next(g for g in GROUPS if g != "gpu")
    page = f"# B\n\nbefore\n\n<!-- benchmarks: {group} -->\n\nafter\n"
    out = hook.on_page_markdown(page, page=None, config={}, files=None)
    assert "<!-- benchmarks:" not in out
    assert out.startswith("# B\n\nbefore\n\n| ")
    assert out.endswith("\n\nafter\n")
