"""MkDocs hook: an example the test suite cannot run here (``<!-- example: not-run: REASON
-->`` above its fence; see tests/docs/blocks.py) is shown with a line saying so and why, so
a reader knows which examples were run and which were only compiled."""

from __future__ import annotations

import re
from typing import Any

NOT_RUN = re.compile(r"^([ \t]*)<!--\s*example:\s*not-run\s*:?\s*(.*?)\s*-->[ \t]*$", re.M)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    def note(m: re.Match[str]) -> str:
        indent, reason = m.group(1), m.group(2)
        return f'{indent}!!! info "Not run by the test suite: {reason}"\n'

    return NOT_RUN.sub(note, markdown)
