"""MkDocs hook: the error hierarchy, drawn from the classes themselves. A page holding the
line ``<!-- error-tree -->`` gets a nested list of every exception ``tensorfile.errors``
exports, each under its tensorfile parent, with the built-in bases it also derives from."""

from __future__ import annotations

from typing import Any

MARKER = "<!-- error-tree -->"


def error_tree() -> str:
    """The Markdown list of the hierarchy."""
    import tensorfile.errors as errors

    classes = {name: getattr(errors, name) for name in errors.__all__}
    classes = {n: c for n, c in classes.items() if isinstance(c, type)}
    ours = set(classes.values())

    def parent(cls: type) -> type | None:
        for base in cls.__mro__[1:]:
            if base in ours:
                return base
        return None

    children: dict[type | None, list[type]] = {}
    for cls in classes.values():
        children.setdefault(parent(cls), []).append(cls)
    lines: list[str] = []

    def walk(node: type | None, depth: int) -> None:
        for cls in sorted(children.get(node, []), key=lambda c: c.__name__):
            extra = [
                b.__name__
                for b in cls.__bases__
                if b not in ours and b.__module__ == "builtins" and b is not Exception
            ]
            also = f" (also a `{'`, `'.join(extra)}`)" if extra else ""
            link = f"[`{cls.__name__}`][tensorfile.errors.{cls.__name__}]"
            lines.append(f"{'    ' * depth}- {link}{also}")
            walk(cls, depth + 1)

    walk(None, 0)
    return "\n".join(lines)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, error_tree())
