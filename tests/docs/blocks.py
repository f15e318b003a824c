"""The code blocks of a Markdown page, as the docs tests run them.

* ```` ```python ```` blocks run, in page order, in one namespace per page.
* ```` ```console ```` blocks: each ``$ command`` line runs in bash; the lines under it, up to
  the next ``$`` line, are its expected output (``...`` alone on a line: any lines; ``...``
  inside a line: any text).
* any other fence is shown, not run.
* in python blocks, a `print(...)  # shown` line is checked: the comment must start with
  what was printed (or match it, `...` standing for any text).

An example that needs more than ``pip install .`` says so to the reader on its first line, a
comment naming what to install: ``# needs: pip install 'tensorfile[torch]'`` (extras of
tensorfile or other packages, as pip takes them). The plain-install test
(tests/docs/test_plain_install.py) skips such a block only where that is not installed.

A marker on the line right above a fence changes that: ``<!-- example: not-run: REASON -->``
(compiled, not run: a GPU, a cloud account), ``<!-- example: exit=N -->`` (each command of the
block exits N).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
MARKER = re.compile(r"^\s*<!--\s*example:\s*(?P<body>.*?)\s*-->\s*$")
RUN_KINDS = ("python", "console")
NEEDS = re.compile(r"^#\s*needs:\s*pip install\s+(?P<what>\S.*?)\s*$")


@dataclass
class Command:
    """One ``$`` line of a console block and the output it must print (None: unchecked)."""

    line: int
    command: str
    expected: list[str] | None


@dataclass
class Block:
    """A fenced block: its kind (the fence's language), the line of its first code line, the
    code with the fence's indentation taken off, and its marker."""

    kind: str
    line: int
    code: str
    not_run: str | None = None
    exit_status: int = 0
    commands: list[Command] = field(default_factory=list)
    needs: tuple[str, ...] = ()

    @property
    def runs(self) -> bool:
        return self.kind in RUN_KINDS and self.not_run is None


def _marker(lines: list[str], fence_index: int) -> tuple[str | None, int]:
    """(not-run reason, exit status) from the marker above the fence at ``fence_index``."""
    if fence_index == 0:
        return None, 0
    m = MARKER.match(lines[fence_index - 1])
    if m is None:
        return None, 0
    body = m.group("body")
    if body.startswith("not-run"):
        reason = body[len("not-run") :].lstrip(":").strip()
        if not reason:
            raise ValueError(f"line {fence_index}: a not-run marker must give its reason")
        return reason, 0
    ex = re.fullmatch(r"exit\s*=\s*(\d+)", body)
    if ex is not None:
        return None, int(ex.group(1))
    raise ValueError(f"line {fence_index}: unknown example marker {body!r}")


def needs(code: str) -> tuple[str, ...]:
    """What a block's first line says it needs installed (``# needs: pip install X Y``):
    the requirements as pip takes them (quotes removed), none without that line."""
    import shlex

    first = code.split("\n", 1)[0].strip()
    m = NEEDS.match(first)
    return tuple(shlex.split(m.group("what"))) if m else ()


def _dedent(line: str, indent: str) -> str:
    return line[len(indent) :] if line.startswith(indent) else line.lstrip()


def console_commands(code: str, first_line: int) -> list[Command]:
    """The commands of a console block with their expected output."""
    out: list[Command] = []
    lines = code.split("\n")
    i = 0
    while i < len(lines):
        text = lines[i]
        if not text.startswith("$ "):
            if text.strip() and not out:
                raise ValueError(f"line {first_line + i}: console output before any $ command")
            if out and out[-1].expected is not None:
                out[-1].expected.append(text)
            elif out:
                out[-1].expected = [text]
            i += 1
            continue
        start = i
        command = text[2:]
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command[:-1] + "\n" + lines[i]
        out.append(Command(first_line + start, command, None))
        i += 1
    for c in out:
        if c.expected is not None:
            while c.expected and not c.expected[-1].strip():
                c.expected.pop()
            if not c.expected:
                c.expected = None
    return out


def blocks(text: str) -> list[Block]:
    """Every fenced block of a page, in order."""
    lines = text.split("\n")
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        indent, ticks = m.group("indent"), m.group("ticks")
        info = m.group("info").strip()
        kind = info.split()[0].lower() if info else ""
        kind = kind.lstrip("{.").rstrip("}")
        close = re.compile(r"^[ \t]*" + re.escape(ticks[0]) + "{" + str(len(ticks)) + r",}\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        code = "\n".join(_dedent(t, indent) for t in lines[i + 1 : j])
        not_run, status = _marker(lines, i)
        block = Block("python" if kind == "py" else kind, i + 2, code, not_run, status)
        block.needs = needs(code)
        if block.kind == "console":  # the needs line is a comment, not a command's output
            skip = 1 if block.needs else 0
            rest = "\n".join(code.split("\n")[skip:])
            block.commands = console_commands(rest, i + 2 + skip)
        out.append(block)
        i = j + 1
    return out


def _line_pattern(expected: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(p) for p in expected.split("...")), re.DOTALL)


def output_matches(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` lines fit ``expected`` (``...`` lines and ``...`` inside lines)."""
    exp = [e.rstrip() for e in expected]
    act = [a.rstrip() for a in actual]
    while act and not act[-1]:
        act.pop()
    memo: dict[tuple[int, int], bool] = {}

    def fit(i: int, j: int) -> bool:
        key = (i, j)
        if key in memo:
            return memo[key]
        if i == len(exp):
            result = j == len(act)
        elif exp[i].strip() == "...":
            result = any(fit(i + 1, k) for k in range(j, len(act) + 1))
        else:
            result = j < len(act) and _line_pattern(exp[i]).fullmatch(act[j]) is not None
            result = result and fit(i + 1, j + 1)
        memo[key] = result
        return result

    return fit(0, 0)


PRINT_CALL = "__docs_print__"


def checked_prints(code: str, first_line: int) -> str:
    """``code`` with each ``print(...)  # shown`` line turned into a call of
    :data:`PRINT_CALL` that also checks the printed text against the comment (the comment must
    start with it; words after it explain). Prints with keywords, or none of their own line,
    stay as they are."""
    import ast
    import io
    import tokenize

    comments: dict[int, tuple[int, str]] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = (tok.start[1], tok.string[1:].strip())
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return code
    lines = code.split("\n")
    for number, (column, comment) in comments.items():
        line = lines[number - 1]
        statement = line[:column].rstrip()
        stripped = statement.strip()
        if not stripped.startswith("print(") or not comment:
            continue
        try:
            tree = ast.parse(stripped)
        except SyntaxError:
            continue
        node = tree.body[0] if len(tree.body) == 1 else None
        if not (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "print"
            and node.value.args
            and not node.value.keywords
        ):
            continue
        indent = statement[: len(statement) - len(statement.lstrip())]
        inner = stripped[len("print(") : -1]
        lines[number - 1] = (
            f"{indent}{PRINT_CALL}({inner}, expected={comment!r}, line={first_line + number - 1})"
        )
    return "\n".join(lines)


def print_matches(printed: str, comment: str) -> bool:
    """Whether a ``# comment`` shows what was printed: it starts with the printed text (words
    after it explain), whitespace evened out; or, holding ``...`` (any text), it matches the
    whole printed text."""
    text = " ".join(printed.split())
    shown = " ".join(comment.split())
    if shown.startswith(text):
        return True
    pattern = ".*".join(re.escape(p) for p in shown.split("..."))
    return "..." in shown and re.fullmatch(pattern, text) is not None
