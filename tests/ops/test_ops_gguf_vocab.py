"""GGUF files whose header is a tokenizer vocabulary: the structural hash's fast canonical
text (checked against the independent weight-inspect reference, item by item), the parser's
string arrays (checked against the ``gguf`` package's writer input and reader), progress
reports, and :func:`brief_value`, which shortens a 150,000-item value the
way ``inspect`` does."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorfile import ops
from tensorfile.errors import GGUFError, InvalidArgumentError
from tensorfile.gguf import GGUFValue, read_header
from tensorfile.ops.hash import canonical_json, canonical_value
from tensorfile.ops.inspect import BRIEF_CHARS, brief_value, json_metadata
from tensorfile.sources import MemorySource
from tests.helpers.catalogs import catalog
from tests.helpers.weight_inspect import expected_canonical, sha256_hex, wi_gguf, wi_text

N_TOKENS = 150_000
ESCAPED = ['"', "\\", "\n", "\r", "\t", "\x00", "\x08", "\x1b", "\x1f", "\x7f"]
KEPT = ["é", "\x85", "\u2028", "語", "🙂", "Ġ", "\ufeff", "\x80", " ", ""]


def vocabulary(n: int) -> list[str]:
    """``n`` tokens: mostly plain, every 97th holding a character weight-inspect escapes,
    every 89th one it keeps, and some empty."""
    out = []
    for i in range(n):
        if i % 97 == 0:
            out.append(f"a{ESCAPED[i % len(ESCAPED)]}b{i}")
        elif i % 89 == 0:
            out.append(f"{KEPT[i % len(KEPT)]}{i}")
        elif i % 1009 == 0:
            out.append("")
        else:
            out.append(f"Ġtok{i}")
    return out


def write_vocab(path: Path, tokens: list[str], *, with_tensor: bool = True) -> Path:
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_scores(np.linspace(-1.0, 0.0, len(tokens), dtype=np.float32).tolist())
    w.add_token_types([1 + i % 5 for i in range(len(tokens))])
    if with_tensor:
        w.add_tensor("w", np.arange(6, dtype=np.float32).reshape(2, 3))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    tokens = vocabulary(N_TOKENS)
    return write_vocab(tmp_path_factory.mktemp("vocab") / "v.gguf", tokens), tokens


# -- the parser ---------------------------------------------------------------------------------


def test_vocabulary_parsed_exactly(vocab_file: tuple[Path, list[str]]) -> None:
    path, tokens = vocab_file
    s = ops.load(str(path))
    assert s.metadata["tokenizer.ggml.tokens"].value == tokens  # across 1 MiB chunks
    scores = s.metadata["tokenizer.ggml.scores"]
    want = np.linspace(-1.0, 0.0, N_TOKENS, dtype=np.float32)
    assert scores.value == want.tolist()
    assert scores.bits == want.view("<u4").tolist()
    assert s.metadata["tokenizer.ggml.token_type"].value == [1 + i % 5 for i in range(N_TOKENS)]
    reader = gguf.GGUFReader(str(path))
    field = reader.fields["tokenizer.ggml.tokens"]
    assert [bytes(field.parts[i]).decode() for i in field.data[:2000]] == tokens[:2000]


@pytest.mark.parametrize("bad", [b"\xff", b"\xc3", b"ok\xc3(", b"\xed\xa0\x80", b"\xff" * 8])
@pytest.mark.parametrize("at", [0, 1, 5000])
def test_a_bad_string_in_a_run_is_reported_at_its_offset(bad: bytes, at: int) -> None:
    """A string that is not UTF-8, first in the run, in the first chunk or further on, is
    reported by index and offset."""
    strings = [f"t{i}".encode() for i in range(6000)]
    strings[at] = bad
    body = b"".join(struct.pack("<Q", len(x)) + x for x in strings)
    key = b"tokenizer.ggml.tokens"
    blob = (
        b"GGUF"
        + struct.pack("<IQQ", 3, 0, 1)
        + struct.pack("<Q", len(key))
        + key
        + struct.pack("<IIQ", 9, 8, len(strings))
        + body
    )
    offset = blob.index(struct.pack("<Q", len(bad)) + bad, 40 if at else 0) + 8
    with pytest.raises(GGUFError, match=rf"tokens'\[{at}\] is not UTF-8") as info:
        read_header(MemorySource(blob + bytes(32)))
    assert info.value.offset is not None
    assert offset <= info.value.offset < offset + len(bad)


# -- the canonical text -----------------------------------------------------------------------


def test_vocabulary_hash_matches_the_reference(vocab_file: tuple[Path, list[str]]) -> None:
    path, tokens = vocab_file
    meta = {
        "general.architecture": wi_text("llama"),
        "tokenizer.ggml.model": wi_text("gpt2"),
        "tokenizer.ggml.tokens": wi_gguf("array", tokens, "string"),
        "tokenizer.ggml.scores": wi_gguf(
            "array", np.linspace(-1.0, 0.0, N_TOKENS, dtype=np.float32).tolist(), "float32"
        ),
        "tokenizer.ggml.token_type": wi_gguf(
            "array", [1 + i % 5 for i in range(N_TOKENS)], "int32"
        ),
    }
    # the structural hash keeps ggml's order of dimensions: [3, 2] for a (2, 3) array
    expected = expected_canonical("gguf", meta, [("w", "f32", [3, 2], 24)], gguf_version=3)
    s = ops.load(str(path))
    assert canonical_json(s) == expected
    assert ops.structural_hash(s) == sha256_hex(expected)


_KINDS = {
    "string": st.text(
        st.characters(codec="utf-8") | st.sampled_from(ESCAPED + KEPT[:-1]), max_size=12
    ),
    "bool": st.booleans(),
    "uint8": st.integers(0, 255),
    "int8": st.integers(-128, 127),
    "uint16": st.integers(0, 2**16 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "uint32": st.integers(0, 2**32 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "uint64": st.integers(0, 2**64 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "float32": st.floats(width=32),
    "float64": st.floats(),
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(_KINDS)).flatmap(lambda k: st.tuples(st.just(k), st.lists(_KINDS[k])))
)
def test_array_canonical_text_equals_the_reference(case: tuple[str, list[Any]]) -> None:
    kind, items = case
    value = GGUFValue("array", items, kind)
    assert canonical_value(value) == wi_gguf("array", items, kind)
    if kind == "float32":  # with the stored bit patterns, as the reader gives them
        bits = [int(np.array(v, "<f4").view("<u4")) for v in items]
        assert canonical_value(GGUFValue("array", items, kind, bits)) == wi_gguf(
            "array", bits, kind
        )


@given(st.text(st.characters(codec="utf-8") | st.sampled_from(ESCAPED), max_size=40))
def test_string_canonical_text_equals_the_reference(text: str) -> None:
    assert canonical_value(text) == wi_text(text)
    assert canonical_value(GGUFValue("string", text)) == wi_text(text)


def test_a_lone_surrogate_in_a_hand_built_array_is_still_refused() -> None:
    """The one-pass escape joins the items with a lone surrogate; an item holding one (only
    a Structure built by hand can) falls back to item by item and is refused as before."""
    for items in (["a", "\ud800", "b"], ["\udfff"], ["x\ud800y", "z"]):
        s = catalog("gguf", "m.gguf", "3", {"k": GGUFValue("array", items, "string")})
        with pytest.raises(InvalidArgumentError, match="not valid Unicode"):
            ops.structural_hash(s)


# -- progress ---------------------------------------------------------------------------------


def _recorder() -> tuple[list[tuple[int, int]], Any]:
    seen: list[tuple[int, int]] = []
    return seen, lambda done, total: seen.append((done, total))


def _check_reports(seen: list[tuple[int, int]]) -> None:
    assert seen, "no progress reported"
    totals = {t for _, t in seen}
    assert len(totals) == 1
    dones = [d for d, _ in seen]
    assert dones == sorted(dones)
    assert dones[-1] == seen[-1][1]
    assert all(0 <= d <= t for d, t in seen)


def test_progress_of_the_structural_hash(vocab_file: tuple[Path, list[str]]) -> None:
    path = str(vocab_file[0])
    seen, report = _recorder()
    digest = ops.structural_hash(path, progress=report)
    assert digest == ops.structural_hash(path)
    _check_reports(seen)
    # the items: 3 arrays of N_TOKENS, 2 strings, 1 tensor
    assert seen[-1] == (3 * N_TOKENS + 3, 3 * N_TOKENS + 3)
    seen, report = _recorder()
    assert ops.inspect(path, progress=report).structural_hash == digest
    _check_reports(seen)


def test_progress_of_the_content_hash_and_diff(tmp_path: Path) -> None:
    from tensorfile.safetensors.numpy import save_file

    a, b = str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")
    big = np.arange(5_000_000, dtype=np.float32)  # 20 MB: more than one 16 MiB piece
    save_file({"big": big, "small": np.zeros(3, np.int8)}, a)
    save_file({"big": big + 1, "small": np.zeros(3, np.int8)}, b)
    seen, report = _recorder()
    ops.content_hash(a, report)
    _check_reports(seen)
    assert seen[-1][1] == big.nbytes + 3
    seen, report = _recorder()
    r = ops.diff(a, b, data=True, progress=report)
    assert [d.name for d in r.data or []] == ["big"]
    _check_reports(seen)
    assert seen[-1] == (big.nbytes + 3, big.nbytes + 3)
    assert len(seen) >= 4  # the big tensor reports piece by piece


# -- brief values -----------------------------------------------------------------------------


def _cut(text: str, limit: int = BRIEF_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@given(
    st.one_of(
        st.text(),
        st.lists(st.text(max_size=30) | st.integers() | st.floats() | st.booleans()),
        st.integers(),
        st.floats(),
        st.booleans(),
    ),
    st.integers(0, 300),
)
def test_brief_value_is_str_cut(value: Any, limit: int) -> None:
    """What inspect shows: ``str(value)`` cut to ``limit`` characters, only cheaper."""
    full = str(value)
    want = full if len(full) <= limit else full[: max(0, limit - 3)] + "..."
    assert brief_value(value, limit=limit) == want
    assert brief_value(value, verbose=True, limit=limit) == str(value)


def _escape_for_terminal(text: str) -> str:
    """A stand-in for the CLI's escaping: character by character, never shorter."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


@given(st.lists(st.text(st.characters(codec="utf-8"), max_size=20), max_size=60))
def test_brief_value_then_escaping_is_escaping_then_cutting(items: list[str]) -> None:
    """The CLI escapes for the terminal after cutting; escaping the brief text and cutting
    again gives what escaping the whole text and cutting it gives (inspect's way)."""
    whole = _cut(_escape_for_terminal(str(items)))
    assert _cut(_escape_for_terminal(brief_value(items))) == whole


def test_brief_value_of_a_vocabulary_is_cheap_and_short(
    vocab_file: tuple[Path, list[str]],
) -> None:
    s = ops.load(str(vocab_file[0]))
    value = s.metadata["tokenizer.ggml.tokens"]
    shown = brief_value(value)  # its speed is benchmarks.gguf_bench's business, not a test's
    assert len(shown) == BRIEF_CHARS
    assert shown == _cut(str(json_metadata({"k": value})["k"]))
    scores = brief_value(s.metadata["tokenizer.ggml.scores"])
    assert scores.startswith("[-1.0, ") and scores.endswith("...")


def test_diff_of_vocabularies_carries_whole_values_a_renderer_cuts(tmp_path: Path) -> None:
    tokens = vocabulary(20_000)
    a = write_vocab(tmp_path / "a.gguf", tokens)
    b = write_vocab(tmp_path / "b.gguf", [*tokens[:-1], "changed"])
    r = ops.diff(str(a), str(b))
    assert list(r.metadata_changed) == ["tokenizer.ggml.tokens"]
    before, after = r.metadata_changed["tokenizer.ggml.tokens"]
    assert before == tokens and after[-1] == "changed"
    assert len(brief_value(before)) == BRIEF_CHARS
    assert brief_value(before) == brief_value(after)  # they differ at the end only
    assert ops.diff(str(a), str(a)).identical
