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


# the headlines: README's "Why" and the home page's "Measured"
HEADLINES = {"README.md": "## Why", "docs/index.md": "## Measured"}
FACTOR = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)(?:–(\d+(?:\.\d+)?))?×")
RUN_RANGE = re.compile(r"(\d+\.\d+)(?:\*\*)? \((\d+\.\d+)–(\d+\.\d+)\)")


def headline_bullets(text: str, section: str) -> list[str]:
    """The bullets of ``section`` (a '## ' heading) of a Markdown text, each joined into one
    line."""
    body = text.split(section + "\n", 1)[1].split("\n## ", 1)[0]
    bullets: list[str] = []
    for line in body.splitlines():
        if line.startswith("- "):
            bullets.append(line[2:])
        elif line.startswith("  ") and bullets:
            bullets[-1] += " " + line.strip()
    return bullets


def measured_ranges() -> tuple[set[tuple[str, str]], set[str]]:
    """Every per-run range and every median the rendered tables give, rounded as a headline
    writes them (one decimal)."""
    ranges, medians = set(), set()
    for group in GROUPS:
        for median, lo, hi in RUN_RANGE.findall(hook.render_group(group)):
            ranges.add((f"{float(lo):.1f}", f"{float(hi):.1f}"))
            medians.add(f"{float(median):.1f}")
    return ranges, medians


def unmeasured_figures(bullet: str, ranges: set[tuple[str, str]], medians: set[str]) -> list[str]:
    """The factors of a headline that are not a range of runs the tables give, or a median
    named as such that the tables give."""
    wrong = []
    for m in FACTOR.finditer(bullet):
        lo, hi = m.group(1), m.group(2)
        if hi is not None:
            ok = (lo, hi) in ranges
        else:
            ok = bullet[: m.start()].endswith("median ") and lo in medians
        if not ok:
            wrong.append(m.group(0))
    return wrong


@pytest.mark.parametrize("path", list(HEADLINES))
def test_headlines_quote_the_range_of_runs(path: str) -> None:
    """A headline quotes the range its table measured across runs ("1.4–2.5×"), never a
    single run's or a single median's figure on its own; a median may follow, named."""
    ranges, medians = measured_ranges()
    bullets = headline_bullets((REPO / path).read_text(encoding="utf-8"), HEADLINES[path])
    assert len(bullets) >= 3
    for bullet in bullets:
        assert FACTOR.search(bullet), bullet
        assert not unmeasured_figures(bullet, ranges, medians), bullet


def test_a_headline_with_one_best_number_fails() -> None:
    ranges, medians = measured_ranges()
    assert ("2.1", "2.3") in ranges and "2.3" in medians  # process_load_numpy's load
    assert unmeasured_figures("**2.3× the reference's `load_file`**", ranges, medians) == ["2.3×"]
    assert unmeasured_figures("**2.1× the reference**", ranges, medians) == ["2.1×"]
    assert unmeasured_figures("**2.1–2.3×** the reference (median 2.3×)", ranges, medians) == []
    assert ("0.4", "2.3") not in ranges
    assert unmeasured_figures("**0.4–2.3×** the reference", ranges, medians) == ["0.4–2.3×"]
