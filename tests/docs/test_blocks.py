"""The example runner's reading of pages: what runs, markers, and output matching."""

from __future__ import annotations

import pytest

from tests.docs.blocks import PRINT_CALL, blocks, checked_prints, output_matches, print_matches

PAGE = """# A page

```python
x = 1
```

<!-- example: not-run: needs a CUDA GPU -->
```python
y = x.cuda()
```

=== "tab"

    ```python
    z = x + 1
    ```

<!-- example: exit=1 -->
```console
$ tensorfile diff a b
1 tensor changed
...
$ echo done \\
  twice
```

```bash
make demo
```
"""


def test_kinds_markers_and_indented_blocks() -> None:
    found = blocks(PAGE)
    assert [b.kind for b in found] == ["python", "python", "python", "console", "bash"]
    assert [b.runs for b in found] == [True, False, True, True, False]
    assert found[1].not_run == "needs a CUDA GPU"
    assert found[2].code == "z = x + 1"
    console = found[3]
    assert console.exit_status == 1
    assert [c.command for c in console.commands] == ["tensorfile diff a b", "echo done \n  twice"]
    assert console.commands[0].expected == ["1 tensor changed", "..."]
    assert console.commands[1].expected is None


NEEDS = """
```python
# needs: pip install 'tensorfile[torch]' safetensors
import torch
```

```console
# needs: pip install "tensorfile[spark,s3]"
$ tensorfile summary model.pt
model.pt,pytorch,...
```

```python
import numpy  # needs: nothing, not on the first line
```
"""


def test_what_an_example_needs_is_on_its_first_line() -> None:
    """The reader sees it; the plain-install test skips the block only for it."""
    py, console, plain = blocks(NEEDS)
    assert py.needs == ("tensorfile[torch]", "safetensors")
    assert console.needs == ("tensorfile[spark,s3]",)
    assert [c.command for c in console.commands] == ["tensorfile summary model.pt"]
    assert console.commands[0].expected == ["model.pt,pytorch,..."]
    assert console.commands[0].line == 9  # the line of the page it is on
    assert plain.needs == ()
    assert py.runs and console.runs and plain.runs


def test_a_not_run_marker_needs_its_reason() -> None:
    with pytest.raises(ValueError, match="reason"):
        blocks("<!-- example: not-run -->\n```python\nx\n```\n")


def test_an_unknown_marker_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown"):
        blocks("<!-- example: sometimes -->\n```python\nx\n```\n")


@pytest.mark.parametrize(
    ("expected", "actual", "fits"),
    [
        (["a", "b"], ["a", "b", ""], True),
        (["a", "b"], ["a", "c"], False),
        (["a", "..."], ["a", "x", "y"], True),
        (["...", "z"], ["z"], True),
        (["took ... s"], ["took 0.1 s"], True),
        (["took ... s"], ["took 0.1 ms!"], False),
        (["a"], ["a", "b"], False),
        (["a   "], ["a"], True),
    ],
)
def test_output_matching(expected: list[str], actual: list[str], fits: bool) -> None:
    assert output_matches(expected, actual) is fits


def test_print_comments_are_checked() -> None:
    code = (
        'x = 2\nprint(x + 1)  # 3, the sum\nif x:\n    print("a", x)  # a 2\nprint(x, end="")  # 9'
    )
    out = checked_prints(code, 10)
    lines = out.split("\n")
    assert lines[1] == f"{PRINT_CALL}(x + 1, expected='3, the sum', line=11)"
    assert lines[3] == f"    {PRINT_CALL}(\"a\", x, expected='a 2', line=13)"
    assert lines[4] == 'print(x, end="")  # 9'  # keywords: left alone
    assert print_matches("3", "3, the sum")
    assert print_matches("(64, 32)", "(64,  32)")
    assert print_matches("took 0.25 s", "took ... s")
    assert not print_matches("4", "3, the sum")
