"""A Griffe extension for the docs build. It reads the ``Example:`` sections as examples
(doctests rendered as code), and it turns the Sphinx roles the docstrings use
(``:func:`tensorfile.open```, ``:class:`~x.Y```, ...) into Markdown inline code, which
mkdocstrings renders (it would print the role names literally).

The docstrings keep their roles: they read well in ``help()`` and in editors, and the
doctests don't care.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)
ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|exc|data|obj|const|term):`~?([^`]+)`")


def plain_roles(text: str) -> str:
    """``:func:`~a.b``` -> ```b``` (the tilde keeps the last part), ``:mod:`a``` -> ```a```."""

    def one(m: re.Match[str]) -> str:
        target = m.group(1)
        if m.group(0).split("`", 1)[1].startswith("~"):
            target = target.rsplit(".", 1)[-1]
        return f"`{target}`"

    return ROLE.sub(one, text)


# modules whose public functions are made at import time (one factory serves every
# framework), which static analysis cannot see: they are inspected instead
MADE_AT_IMPORT = (
    "tensorfile.safetensors.flax",
    "tensorfile.safetensors.mlx",
    "tensorfile.safetensors.paddle",
    "tensorfile.safetensors.tensorflow",
)


def _clean(obj: griffe.Object) -> None:
    # Google style names the section "Examples"; ours say "Example" (one example), which
    # Griffe would render as an admonition with the doctest as plain text
    if obj.docstring is not None:
        text = EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
        obj.docstring.value = plain_roles(text)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring once its object is loaded, and adds the
    functions of :data:`MADE_AT_IMPORT` by inspecting the imported modules."""

    def on_module(self, *, mod: griffe.Module, **kwargs: Any) -> None:
        if mod.path not in MADE_AT_IMPORT:
            return
        runtime = griffe.inspect(mod.path, docstring_parser="google")
        for name in runtime.exports or ():
            member = runtime.members.get(str(name))
            if isinstance(member, griffe.Function):
                _clean(member)
                mod.set_member(str(name), member)

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        _clean(obj)
