"""``make`` run by a test as a user runs it from a shell: not as a sub-make of the ``make
test`` that runs the suite (a sub-make inherits MAKEFLAGS, with its jobserver, and MAKELEVEL,
which turns ``make:`` into ``make[2]:`` in what make prints)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

MAKE_VARIABLES = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
"""What a parent make exports to the commands of its recipes."""


def as_a_user(env: Mapping[str, str] | None = None, drop: Iterable[str] = ()) -> dict[str, str]:
    """``env`` (this process's environment by default) without make's own variables nor
    the names in ``drop``."""
    gone = {*MAKE_VARIABLES, *drop}
    return {k: v for k, v in (os.environ if env is None else env).items() if k not in gone}
