"""Running a page's examples: its ``python`` blocks in page order in one namespace, its
``console`` commands in bash, in a folder holding the sample files.

The docs tests run pages in their own process (tests/docs/test_examples.py). Run as
``python -m tests.docs.runner PAGE FOLDER URL REPORT`` (only the standard library and the
package under test needed), it runs one page in the interpreter that runs it, as a reader
with that interpreter's install would: a block whose first line names what it needs
(``# needs: pip install ...``) runs only where that is installed, and is otherwise skipped
with what is missing. ``REPORT`` gets a JSON report: where ``tensorfile`` was imported
from, each block run, each skipped with what it needs and what of it is missing, and the
``# shown`` comments that did not show what was printed. An example that fails ends the
process with status 1 and its error on stderr.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.docs.blocks import (
    PRINT_CALL,
    Block,
    blocks,
    checked_prints,
    output_matches,
    print_matches,
)

EXAMPLE_URL = "https://example.com/"
REPO = Path(__file__).resolve().parents[2]


def print_checker(page: str, wrong: list[str]) -> Callable[..., None]:
    """The ``print`` of the examples' ``print(...)  # shown`` lines: prints, and notes each
    comment that does not show what was printed."""

    def checked(*args: Any, expected: str, line: int) -> None:
        text = " ".join(str(a) for a in args)
        print(text, flush=True)
        if "\n" not in text and not print_matches(text, expected):
            wrong.append(f"{page}:{line}: printed {text!r}, the comment says {expected!r}")

    return checked


def run_python(page: str, block: Block, code: str, namespace: dict[str, Any]) -> None:
    code = checked_prints(code, block.line)
    compiled = compile(code, f"{page}:{block.line}", "exec")
    try:
        exec(compiled, namespace)
    except Exception as exc:
        raise AssertionError(f"{page}:{block.line}: the example raised {exc!r}") from exc


def run_console(page: str, block: Block, url: str, folder: Path, env: dict[str, str]) -> None:
    for command in block.commands:
        done = subprocess.run(
            ["bash", "-c", command.command.replace(EXAMPLE_URL, url)],
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
        )
        where = f"{page}:{command.line}: $ {command.command}"
        assert done.returncode == block.exit_status, (
            f"{where}\nexited {done.returncode}, not {block.exit_status}:\n{done.stdout}"
        )
        if command.expected is not None:
            actual = done.stdout.split("\n")
            assert output_matches(command.expected, actual), (
                f"{where}\nprinted:\n{done.stdout}\nexpected:\n" + "\n".join(command.expected)
            )


def run_blocks(
    page: str, runnable: Sequence[Block], url: str, folder: Path, env: dict[str, str]
) -> list[str]:
    """Run ``runnable`` (the current folder is ``folder``); the ``# shown`` comments that did
    not show what was printed."""
    wrong: list[str] = []
    namespace: dict[str, Any] = {"__name__": "__docs__", PRINT_CALL: print_checker(page, wrong)}
    for block in runnable:
        if block.kind == "python":
            run_python(page, block, block.code.replace(EXAMPLE_URL, url), namespace)
        else:
            run_console(page, block, url, folder, env)
    return wrong


def _name(requirement: str) -> str:
    m = re.match(r"[A-Za-z0-9._-]+", requirement)
    return m.group(0) if m else requirement


def missing(requirement: str) -> list[str]:
    """What of ``requirement`` (``tensorfile[torch,s3]``, ``safetensors``...) this
    interpreter lacks: the distributions not installed, each of tensorfile's extras by the
    packages it requires. An extra tensorfile does not have is an error."""
    from importlib import metadata

    def installed(name: str) -> bool:
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            return False
        return True

    name = _name(requirement)
    if name != "tensorfile" or "[" not in requirement:
        return [] if installed(name) else [name]
    wanted = requirement[requirement.index("[") + 1 : requirement.rindex("]")].split(",")
    by_extra: dict[str, list[str]] = {}
    for line in metadata.requires("tensorfile") or []:
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", line)
        if extra is not None:
            by_extra.setdefault(extra.group(1), []).append(_name(line))
    out: list[str] = []
    for extra in (e.strip() for e in wanted):
        if extra not in by_extra:
            raise AssertionError(f"{requirement}: tensorfile has no extra {extra!r}")
        out += [f"{extra}: {dep}" for dep in by_extra[extra] if not installed(dep)]
    return out


def main(argv: Sequence[str]) -> int:
    page, folder, url, report = argv  # the page relative to the repository
    text = (REPO / page).read_text(encoding="utf-8")
    os.chdir(folder)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the tests' path
    runnable, done = [], []
    for block in blocks(text):
        if not block.runs:
            continue
        lacking = [m for r in block.needs for m in missing(r)]
        done.append({"line": block.line, "needs": list(block.needs), "missing": lacking})
        if not lacking:
            runnable.append(block)
    result = {"tensorfile": None, "blocks": done, "wrong": [], "ok": False}
    try:
        result["wrong"] = run_blocks(page, runnable, url, Path(folder), env)
        result["ok"] = True
    finally:
        module = sys.modules.get("tensorfile")
        result["tensorfile"] = getattr(module, "__file__", None)
        Path(report).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
