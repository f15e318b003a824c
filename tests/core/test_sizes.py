"""Sizes written as text (``core.sizes.parse_size``): exact, ASCII, bounded; every bad text
an InvalidArgumentError that names it (never a bare OverflowError, never a silent rounding),
and the cache's variables named in their errors."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorfile.core.sizes import MAX_SIZE, parse_size
from tensorfile.errors import InvalidArgumentError
from tensorfile.sources import open_path
from tensorfile.sources.cache.settings import CACHE_CHUNK_ENV, CACHE_SIZE_ENV


@pytest.mark.parametrize(
    ("text", "n"),
    [("1.5GiB", 3 << 29), ("0.1KB", 100), ("1.25 KiB", 1280), ("8TiB", 8 << 40), (" 7 ", 7)],
)
def test_fractions_that_make_whole_bytes_are_exact(text: str, n: int) -> None:
    assert parse_size(text) == n


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("9" * 400, "too long"),
        ("1" + "0" * 300 + "TiB", "too long"),
        ("9" * 50, "too large"),
        ("1" + "0" * 30 + "TiB", "too large"),
        (MAX_SIZE + 1, "too large"),
        ("1.5", "not a whole number of bytes"),
        ("1.5B", "not a whole number of bytes"),
        ("1.0001KB", "not a whole number of bytes"),
        ("\uff11\uff10\uff10", "expected a number"),  # full-width digits
        ("\u0663", "expected a number"),  # an Arabic-Indic three
        ("1\u00a0GB", "expected a number"),  # a no-break space
    ],
)
def test_bad_sizes_are_refused_with_the_reason(bad: str | int, why: str) -> None:
    with pytest.raises(InvalidArgumentError, match=why) as err:
        parse_size(bad)
    assert len(str(err.value)) < 300  # (a 400-digit text is cut in the message)


@pytest.mark.parametrize(
    "long",
    [
        "1" + " " * (128 << 10) + "!",  # (the pattern once tried each split of these spaces)
        "1" + " " * 64 + "GB",  # (would read as 1 GB: refused all the same)
        "\t" + "1" * 65 + "\n",
    ],
    ids=["128KiB-of-spaces", "spaced-out-1GB", "65-digits"],
)
def test_a_long_size_text_is_refused_for_its_length(long: str) -> None:
    n = len(long.strip())
    with pytest.raises(
        InvalidArgumentError, match=rf"too long \({n:,} characters; a size is at most 64\)"
    ) as err:
        parse_size(long)
    assert len(str(err.value)) < 300


def test_spaces_around_a_size_are_not_counted() -> None:
    assert parse_size(" " * (128 << 10) + "1" + " " * 58 + "KiB\t") == 1024


@given(st.text(max_size=30))
def test_any_text_is_a_size_or_an_invalid_argument_error(text: str) -> None:
    try:
        n = parse_size(text)
    except InvalidArgumentError:
        return
    assert isinstance(n, int) and 1 <= n <= MAX_SIZE


@pytest.mark.parametrize("var", [CACHE_SIZE_ENV, CACHE_CHUNK_ENV])
@pytest.mark.parametrize("value", ["9" * 400, "1.5", "\uff11\uff10\uff10"])
def test_a_bad_cache_variable_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, var: str, value: str
) -> None:
    fsspec.filesystem("memory").pipe("/sizes/f.bin", b"abc")
    monkeypatch.setenv(var, value)
    with pytest.raises(InvalidArgumentError, match=rf"\${var}"):
        open_path("memory://sizes/f.bin", cache_dir=tmp_path)
