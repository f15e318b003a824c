"""Running the ``tensorfile`` command in tests: in-process or as the installed console
script, and checking its output contract (one strict JSON document with ``--json``; one
``tensorfile: error:`` line and nothing on stdout on failure). The model files the CLI tests
read are written by :mod:`tests.helpers.checkpoints`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from tensorfile.cli.app import main

SCRIPT = Path(sys.executable).with_name("tensorfile")
ERROR_PREFIX = "tensorfile: error: "
# rich decides colours and terminal width from these; keep the rendering plain
_RICH_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES")


@dataclass
class Result:
    code: int
    out: str
    err: str


def run(capsys: Any, *argv: str | os.PathLike[str]) -> Result:
    """Run ``tensorfile argv...`` in-process; returns the exit status and both streams."""
    capsys.readouterr()
    with mock.patch.dict(os.environ):
        for key in _RICH_ENV:
            os.environ.pop(key, None)
        code = main([os.fspath(a) for a in argv])
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def run_proc(*argv: str | os.PathLike[str], cwd: Path | None = None) -> Result:
    """Run the installed console script as a separate process."""
    env = {k: v for k, v in os.environ.items() if k not in _RICH_ENV}
    proc = subprocess.run(
        [str(SCRIPT), *(os.fspath(a) for a in argv)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=cwd,
        env=env,
        timeout=60,
        check=False,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def strict_json(text: str) -> Any:
    """Exactly one JSON document (NaN/Infinity rejected), on one line ending in a newline."""
    assert text.endswith("\n"), repr(text[-50:])
    assert text.count("\n") == 1, "expected exactly one line of JSON"
    return json.loads(text, parse_constant=_reject_constant)


def run_json(capsys: Any, *argv: str | os.PathLike[str]) -> Any:
    """Run with ``--json``: status 0, nothing on stderr, one strict JSON document on stdout."""
    r = run(capsys, *argv, "--json")
    assert r.code == 0, r
    assert r.err == ""
    return strict_json(r.out)


def assert_one_error(r: Result, *, code: int = 2, contains: str = "") -> str:
    """Exit ``code``, nothing on stdout, exactly one ``tensorfile: error:`` line on stderr."""
    assert r.code == code, r
    assert r.out == "", r.out
    assert r.err.startswith(ERROR_PREFIX), r.err
    assert r.err.endswith("\n")
    assert r.err.count("\n") == 1, r.err
    assert "Traceback" not in r.err
    message = r.err[len(ERROR_PREFIX) : -1]
    assert message.strip(), "empty error message"
    assert contains in message, (contains, message)
    return message


def natural(names: Any) -> list[str]:
    """``names`` in natural order (``x.2`` before ``x.10``): runs of digits compare by
    value. Written here independently of the command line's own key, as a test oracle."""

    def key(name: str) -> list[Any]:
        return [int(p) if i % 2 else p for i, p in enumerate(re.split(r"(\d+)", name))]

    return sorted(names, key=lambda n: (key(n), n))


def table_rows(text: str, columns: int) -> list[list[str]]:
    """The body rows (split on ``│``, stripped) of the rich tables with ``columns`` columns."""
    rows = []
    for line in text.splitlines():
        if "│" in line:
            cells = [c.strip() for c in line.split("│")]
            if len(cells) == columns:
                rows.append(cells)
    return rows
