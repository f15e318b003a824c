"""The structural hash of files whose metadata, keys or tensor names hold non-ASCII text.

weight-inspect escapes only quotes, backslashes and the ASCII control characters
(U+0000-U+001F, U+007F) inside a metadata value; every other character (Latin-1, the C1
controls U+0080-U+009F, U+2028/U+2029, CJK, astral characters) stays as it is in the UTF-8
JSON it hashes. Checked three ways: literal hashes printed by the real weight-inspect
(commit 7e16458 of las7/weight-inspect, built from source), the independent reference in
:mod:`tests.helpers.weight_inspect` over arbitrary text (hypothesis), and, where the
weight-inspect executable is installed (it is not on PyPI), the executable itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy as ref_st
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorfile import ops
from tensorfile.errors import InvalidArgumentError, TensorFileError
from tensorfile.ops.hash import canonical_json, canonical_value
from tensorfile.safetensors.numpy import save_file
from tests.helpers import weight_inspect as wi
from tests.helpers.catalogs import catalog, tensor

# -- known answers, printed by the real weight-inspect ------------------------------------------


@pytest.mark.parametrize("writer", ["tensorfile", "reference"])
@pytest.mark.parametrize("name", sorted(wi.KNOWN_ANSWERS))
def test_known_answers(tmp_path: Path, name: str, writer: str) -> None:
    metadata, want = wi.KNOWN_ANSWERS[name]
    path = wi.write_vector(tmp_path / "m.safetensors", metadata, writer)
    assert ops.structural_hash(path) == want
    assert ops.inspect(path).structural_hash == want
    # the independent reference agrees with the real tool
    tensors = [("w", "F32", [2, 3], 24), ("é", "I8", [1], 1)]
    doc = wi.expected_canonical(
        "safetensors", {k: wi.wi_text(v) for k, v in metadata.items()}, tensors
    )
    assert canonical_json(ops.load(path)) == doc
    assert wi.sha256_hex(doc) == want


def test_known_answer_gguf(tmp_path: Path) -> None:
    path = wi.write_gguf_vector(tmp_path / "m.gguf")
    assert ops.structural_hash(path) == wi.GGUF_ANSWER


def test_non_ascii_is_written_raw_in_the_hashed_bytes(tmp_path: Path) -> None:
    text = "é\x85\u2028日🙂"
    path = wi.write_vector(tmp_path / "m.safetensors", {"k": text})
    doc = canonical_json(ops.load(path))
    assert f'"k":"\\"{text}\\""' in doc  # inside both JSON layers, the characters themselves
    assert "\\u00" not in doc and "\\u2028" not in doc and "\\ud83d" not in doc


# -- arbitrary text ---------------------------------------------------------------------------

# the characters the rule is about, drawn often, and any other character (no surrogates: a
# safetensors header is UTF-8, which cannot hold one)
SPECIAL = [
    *map(chr, range(0x20)),
    '"',
    "\\",
    "/",
    "\x7f",
    *map(chr, range(0x80, 0xA0)),
    "\xa0",
    "é",
    "\u2028",
    "\u2029",
    "\ufeff",
    "\ufffd",
    "\uffff",
    "–",
    "日",
    "😀",
    "\u200d",
    "\ufe0f",
    "\U0010ffff",
]
CHARS = st.one_of(st.sampled_from(SPECIAL), st.characters(exclude_categories=("Cs",)))
TEXT = st.text(CHARS, max_size=24)


@settings(max_examples=500, deadline=None)
@given(TEXT)
def test_canonical_value_matches_the_reference(text: str) -> None:
    got = canonical_value(text)
    assert got == wi.wi_text(text)
    assert json.loads(got) == text  # valid JSON for the same text
    # only ASCII controls, quotes and backslashes are escaped; nothing else is
    body = got[1:-1]
    for ch in text:
        if ord(ch) >= 0x80:
            assert ch in body
    assert all(ord(c) >= 0x20 and c != "\x7f" for c in body)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    metadata=st.dictionaries(TEXT, TEXT, max_size=5),
    name=st.text(CHARS, min_size=1, max_size=12),
    writer=st.sampled_from(["tensorfile", "reference"]),
)
def test_file_hash_matches_the_reference(metadata: dict[str, str], name: str, writer: str) -> None:
    tensors = {name: np.zeros((2, 1), np.float16), "b": np.zeros(3, np.uint8)}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.safetensors")
        if writer == "tensorfile":
            save_file(tensors, path, metadata=metadata)
        else:
            ref_st.save_file(tensors, path, metadata=metadata)
        doc = wi.expected_canonical(
            "safetensors",
            {k: wi.wi_text(v) for k, v in metadata.items()},
            [(n, {"float16": "F16", "uint8": "U8"}[a.dtype.name], list(a.shape), a.nbytes)
             for n, a in tensors.items()],
        )  # fmt: skip
        assert canonical_json(ops.load(path)) == doc
        assert ops.structural_hash(path) == wi.sha256_hex(doc)


@settings(max_examples=200, deadline=None)
@given(st.text(CHARS, min_size=1, max_size=8), st.text(CHARS, min_size=1, max_size=8))
def test_different_text_different_canonical_value(a: str, b: str) -> None:
    assert (canonical_value(a) == canonical_value(b)) == (a == b)


# -- text that is not Unicode -----------------------------------------------------------------


@pytest.mark.parametrize("where", ["value", "key", "tensor"])
def test_a_lone_surrogate_in_a_built_structure_is_refused(where: str) -> None:
    bad = "x\ud800y"
    metadata = {"k": bad} if where == "value" else {bad: "v"} if where == "key" else {}
    name = bad if where == "tensor" else "w"
    s = catalog("safetensors", "built", None, metadata, [tensor(name, "F32", (1,))])
    with pytest.raises(InvalidArgumentError, match="not valid Unicode") as err:
        ops.structural_hash(s)
    assert isinstance(err.value, TensorFileError)
    assert "built" in str(err.value)


def test_an_unknown_value_type_is_a_tensorfile_error() -> None:
    with pytest.raises(TensorFileError, match="cannot canonicalise"):
        canonical_value(3.5)


# -- the real weight-inspect, where installed ------------------------------------------------

BINARY = wi.binary()
needs_binary = pytest.mark.skipif(BINARY is None, reason="weight-inspect is not installed")


def _wi_id(path: str) -> str:
    assert BINARY is not None
    done = subprocess.run(
        [BINARY, "id", "--json", path], capture_output=True, text=True, timeout=60, check=True
    )
    doc: dict[str, Any] = json.loads(done.stdout)
    return str(doc["structural_hash"])


@needs_binary
def test_known_answers_are_the_real_tools(tmp_path: Path) -> None:
    for name, (metadata, want) in wi.KNOWN_ANSWERS.items():
        path = wi.write_vector(tmp_path / f"{name}.safetensors", metadata)
        assert _wi_id(path) == want, name
    assert _wi_id(wi.write_gguf_vector(tmp_path / "m.gguf")) == wi.GGUF_ANSWER


@needs_binary
@settings(max_examples=60, deadline=None)
@given(metadata=st.dictionaries(TEXT, TEXT, max_size=4))
def test_arbitrary_metadata_against_the_real_tool(metadata: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = wi.write_vector(os.path.join(tmp, "m.safetensors"), metadata)
        assert ops.structural_hash(path) == _wi_id(path)
