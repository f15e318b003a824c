"""The README is a front page, and its Python examples are copyable as shown: every
``python`` block starts at the left margin (a block indented inside a list item copies with
its indent and is an ``IndentationError``) and is valid Python as it stands. (They also run:
tests/docs/test_examples.py runs the README with the site's pages.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


def python_blocks(text: str) -> list[tuple[int, str, str]]:
    """(line number, indent of the fence, code) of every ``python`` block."""
    lines = text.split("\n")
    out: list[tuple[int, str, str]] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None or not m.group(2):
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        if m.group(2) in ("python", "py"):
            out.append((i + 1, m.group(1), "\n".join(lines[i + 1 : j])))
        i = j + 1
    return out


BLOCKS = python_blocks(README.read_text(encoding="utf-8"))


def test_the_readme_has_examples() -> None:
    assert len(BLOCKS) >= 5


def test_the_readme_fits_a_front_page() -> None:
    """The guides live on the site (docs/); the README stays about 150 lines."""
    assert len(README.read_text(encoding="utf-8").split("\n")) <= 200


@pytest.mark.parametrize(("line", "indent", "code"), BLOCKS, ids=[f"line{b[0]}" for b in BLOCKS])
def test_each_example_is_copyable_as_shown(line: int, indent: str, code: str) -> None:
    assert indent == "", f"README.md:{line}: the example is indented inside a list item"
    try:
        ast.parse(code)
    except SyntaxError as exc:
        pytest.fail(f"README.md:{line + (exc.lineno or 0)}: {exc.msg}")


def test_an_indented_example_is_caught() -> None:
    sample = "- item\n\n  ```python\n  x = 1\n  ```\n"
    [(_, indent, code)] = python_blocks(sample)
    assert indent == "  "
    with pytest.raises(SyntaxError):
        ast.parse(code)


def test_the_readme_links_point_at_files() -> None:
    """The README's links into the site name pages that exist (the site's own links are
    checked by its strict build)."""
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert local
    missing = [t for t in local if not (README.parent / t).exists()]
    assert not missing, missing
