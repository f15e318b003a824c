"""What the drop-in says about the commonest bad downloads saved as ``*.safetensors``: a Git
LFS pointer (a clone without ``git lfs pull``), an HTML page (a login or error page), a hub's
JSON error body. Read as safetensors, their first eight bytes are a header length of about
10**18; every public load entry point says what the file looks like instead, with the same
exception type as for any header length over the limit (so ``except`` clauses written
against the reference keep working)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import tensorfile
import tensorfile.safetensors as ours
import tensorfile.safetensors.numpy as ours_np
import tensorfile.safetensors.torch as ours_pt
from tensorfile.errors import HeaderTooLargeError, SafetensorError

# what `git clone` without git-lfs leaves in place of model.safetensors (a real pointer's text)
LFS_POINTER = (
    b"version https://git-lfs.github.com/spec/v1\n"
    b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
    b"size 90868376\n"
)
HTML_PAGE = (
    b'<!DOCTYPE html>\n<html class="" lang="en">\n<head>\n<meta charset="utf-8" />\n'
    b"<title>Hugging Face - The AI community building the future.</title>\n</head>\n"
    b"<body><h1>401</h1><p>Invalid username or password.</p></body>\n</html>\n"
)
JSON_ERROR = b'{"error":"Repository Not Found for url: https://huggingface.co/api/models/x/y."}'

DOWNLOADS = {
    "lfs": (LFS_POINTER, "a Git LFS pointer (run `git lfs pull`)"),
    "html": (HTML_PAGE, "an HTML page"),
    "json-error": (JSON_ERROR, "a JSON error response (a failed download?)"),
}

Load = Callable[[Path, bytes], Any]
ENTRY_POINTS: dict[str, Load] = {
    "numpy.load_file": lambda p, b: ours_np.load_file(p),
    "numpy.load": lambda p, b: ours_np.load(b),
    "torch.load_file": lambda p, b: ours_pt.load_file(p),
    "torch.load": lambda p, b: ours_pt.load(b),
    "torch.load_model": lambda p, b: ours_pt.load_model(torch.nn.Linear(1, 1), p),
    "safe_open": lambda p, b: ours.safe_open(str(p), framework="np"),
    "safe_open pt": lambda p, b: ours.safe_open(str(p), framework="pt"),
    "deserialize": lambda p, b: ours.deserialize(b),
    "tensorfile.open format=safetensors": lambda p, b: tensorfile.open(p, format="safetensors"),
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("kind", list(DOWNLOADS))
def test_a_bad_download_says_what_it_is(tmp_path: Path, kind: str, entry: str) -> None:
    blob, what = DOWNLOADS[kind]
    path = tmp_path / "model.safetensors"
    path.write_bytes(blob)
    with pytest.raises(HeaderTooLargeError) as info:
        ENTRY_POINTS[entry](path, blob)
    message = str(info.value)
    assert isinstance(info.value, SafetensorError)  # the reference's exception type
    assert f"looks like {what}, not a safetensors file" in message, message
    assert f"its first 16 of {len(blob)} bytes are {blob[:16]!r}..." in message, message
    assert "over the 100000000-byte limit" in message, message  # what the number means
    in_memory = entry in ("numpy.load", "torch.load", "deserialize")
    assert message.startswith("the data looks like" if in_memory else f"{path} looks like")


def test_binary_garbage_keeps_the_plain_message(tmp_path: Path) -> None:
    blob = bytes(range(250, 256)) * 4  # no text, no known signature
    path = tmp_path / "x.safetensors"
    path.write_bytes(blob)
    with pytest.raises(HeaderTooLargeError) as info:
        ours_np.load_file(path)
    assert "looks like" not in str(info.value)
    assert "over the 100000000-byte limit" in str(info.value)


@pytest.mark.parametrize("entry", [e for e in ENTRY_POINTS if "load_file" in e or "open" in e])
def test_a_file_name_with_control_characters_is_quoted(tmp_path: Path, entry: str) -> None:
    """A name holding a line break and an ANSI escape is shown repr-style, once, never raw
    (a message must not move the cursor or colour the user's terminal)."""
    path = tmp_path / "evil\n\x1b[31mname.safetensors"
    path.write_bytes(HTML_PAGE)
    with pytest.raises(HeaderTooLargeError) as info:
        ENTRY_POINTS[entry](path, HTML_PAGE)
    message = str(info.value)
    assert message.startswith(f"{str(path)!r} looks like an HTML page"), message
    assert "\n" not in message and "\x1b" not in message
