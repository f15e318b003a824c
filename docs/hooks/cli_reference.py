"""MkDocs hook: the command-line reference, generated from tensorfile's own argparse parser,
so it cannot drift from the program. A page holding the line ``<!-- cli-reference -->`` gets
it in that line's place."""

from __future__ import annotations

import argparse
from typing import Any

MARKER = "<!-- cli-reference -->"


def _help_of(parser: argparse.ArgumentParser) -> str:
    # a fixed width: the page must not depend on the terminal of whoever builds it
    formatter = parser.formatter_class

    def wide(prog: str) -> argparse.HelpFormatter:
        return formatter(prog, width=96)  # type: ignore[call-arg]

    parser.formatter_class = wide  # type: ignore[assignment]
    try:
        return parser.format_help()
    finally:
        parser.formatter_class = formatter


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def cli_reference() -> str:
    """The Markdown of the whole command-line reference."""
    from tensorfile.cli._parser import build_parser

    parser = build_parser()
    parser.prog = "tensorfile"
    subs = _subparsers(parser)
    out = ["## `tensorfile`", "", "```text", _help_of(parser).rstrip(), "```", ""]
    todo = list(subs.items())
    while todo:
        name, sub = todo.pop(0)
        sub.prog = f"tensorfile {name}"
        out += [f"## `tensorfile {name}`", "", "```text", _help_of(sub).rstrip(), "```", ""]
        todo[:0] = [(f"{name} {n}", p) for n, p in _subparsers(sub).items()]  # (dataset gc)
    return "\n".join(out)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, cli_reference())
