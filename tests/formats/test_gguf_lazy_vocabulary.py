"""A GGUF vocabulary (llama.cpp's gemma vocabularies: 262,144 tokens) is read checked but not
made a list of tokens until its metadata is asked for: ``tensorfile summary`` (the catalog and
the structural hash) never makes one, and whoever asks for the metadata gets exactly what the
reference ``gguf`` package wrote. Written by the reference ``gguf`` package."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

import tensorfile
from tensorfile.core.values import LazyStrings, TypedValue
from tensorfile.errors import GGUFError
from tensorfile.formats.gguf import LAZY_STRINGS
from tensorfile.ops import structural_hash
from tensorfile.ops._catalogs import load
from tensorfile.ops.hash import canonical_value
from tests.helpers.checkpoints import gguf_blob, gguf_kv, gstr
from tests.helpers.cli import run

N_TOKENS = 262_144
KEY = "tokenizer.ggml.tokens"


def _tokens() -> list[str]:
    """Tokens as vocabularies have them: byte tokens, pieces with ▁, CJK, emoji, and what
    the structural hash escapes (quotes, backslashes, control characters)."""
    special = ["<pad>", "<eos>", '"', "\\", "\n", "\t", "\x7f", "<0x00>", "", "a\x00b"]
    words = [f"▁tok{i}" if i % 3 else f"片{i}🙂" for i in range(N_TOKENS - len(special))]
    return special + words


@pytest.fixture(scope="module")
def vocab(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    path = tmp_path_factory.mktemp("vocab") / "vocab.gguf"
    tokens = _tokens()
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_types([1] * len(tokens))
    w.add_tensor("token_embd.weight", np.ones((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, tokens


def test_a_summary_never_makes_the_token_list(vocab: tuple[Path, list[str]], capsys: Any) -> None:
    path, tokens = vocab
    catalog = load(path)
    value = catalog.metadata[KEY]
    assert isinstance(value, LazyStrings) and len(value) == N_TOKENS
    digest = structural_hash(catalog)
    assert not value.materialized  # the hash read the one text, not a list of tokens
    # the same hash as the token list would give, item by item
    eager = TypedValue("array", list(tokens), "string")
    assert canonical_value(value) == canonical_value(eager)
    assert not value.materialized
    line = run(capsys, "summary", path).out.strip()
    assert line.split(",") == ["gguf", "3", "1", str(len(catalog.metadata)), digest]


def test_metadata_asked_for_is_exactly_what_was_written(vocab: tuple[Path, list[str]]) -> None:
    """(gguf.GGUFReader takes half a minute over 262,144 tokens: the list the reference
    writer was given is the oracle.)"""
    path, tokens = vocab
    with tensorfile.open(path) as f:
        typed = f.typed_metadata[KEY]
        assert typed == TypedValue("array", tokens, "string")
        assert f.metadata[KEY] == tokens
        assert type(f.metadata[KEY]) is list
        assert typed.value == tokens and typed.materialized


def _array_blob(items: list[bytes]) -> bytes:
    """A GGUF header with one string array of ``items`` under ``k`` and no tensor."""
    payload = struct.pack("<IQ", 8, len(items)) + b"".join(gstr(t) for t in items)
    return gguf_blob(kvs=[gguf_kv("k", 9, payload)])


@pytest.mark.parametrize("count", [LAZY_STRINGS - 1, LAZY_STRINGS, 100_000])
def test_a_bad_token_is_the_same_error_kept_or_listed(count: int) -> None:
    """Below the threshold the array is a list, from it one text: the same checks, the same
    error for a token that is not UTF-8 (here one whose byte 0xff follows a length)."""
    items = [f"t{i}".encode() for i in range(count)]
    bad = count - 3
    items[bad] = b"ok\xff"
    blob = _array_blob(items)
    offset = blob.index(b"ok\xff") + 2
    with pytest.raises(GGUFError) as info:
        tensorfile.open(blob)
    assert str(info.value) == f"<memory>: metadata 'k'[{bad}] is not UTF-8 (offset {offset:,})"
    assert info.value.offset == offset
    items[bad] = b"\xff" * 8  # what the kept text marks each length with
    with pytest.raises(GGUFError, match=rf"metadata 'k'\[{bad}\] is not UTF-8"):
        tensorfile.open(_array_blob(items))
    items[bad] = b"fine"
    with tensorfile.open(_array_blob(items)) as f:
        assert f.metadata["k"] == [t.decode() for t in items]
