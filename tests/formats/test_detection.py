"""Format detection names what it finds: every format tensorfile reads is recognised by its
content (not its name), zTensor v2 too; sharded checkpoint indexes are recognised and refused
as not supported yet; anything else is an :class:`UnknownFormatError` that says what the
bytes look like (an HTML page, JSON...), shows the first ones and names the file. Over HTTP
too, whatever the first request was; ``format=`` skips detection; the drop-in ``safe_open``
never detects and keeps its safetensors errors."""

from __future__ import annotations

import json
import struct
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorfile
from tensorfile import formats, ops
from tensorfile.errors import (
    FormatError,
    GGUFError,
    HeaderSyntaxError,
    HeaderTooLargeError,
    SafetensorError,
    TensorFileError,
    UnknownFormatError,
    UnsupportedError,
    ZTensorError,
)
from tensorfile.formats import (
    DETECT_BYTES,
    GGUF,
    SAFETENSORS,
    ZTENSOR,
    ZTENSOR_V2_MAGIC,
    detect,
    read_catalog,
)
from tensorfile.safetensors import safe_open
from tensorfile.safetensors.numpy import save
from tensorfile.sources import MemorySource
from tests.formats.mutants import HOSTILE_U64
from tests.helpers.checkpoints import write_gguf, write_safetensors, write_zt
from tests.helpers.servers import Server, start_plain_server, start_range_server

ARR = np.arange(12, dtype=np.float32).reshape(3, 4)
HTML = (
    b"<!DOCTYPE html>\n<html>\n<head><title>Index of /models/</title></head>\n"
    b'<body><h1>Index of /models/</h1><a href="model.safetensors">model.safetensors</a>'
    b"</body>\n</html>\n"
)
INDEX = {
    "metadata": {"total_size": 96},
    "weight_map": {
        "a": "model-00001-of-00002.safetensors",
        "b": "model-00002-of-00002.safetensors",
        "c": "model-00001-of-00002.safetensors",
    },
}
V2 = ZTENSOR_V2_MAGIC + bytes(4096) + bytes(32) + struct.pack("<II", 2, 0) + ZTENSOR_V2_MAGIC

OPENERS: dict[str, Callable[[Any], Any]] = {
    "tensorfile.open": tensorfile.open,
    "read_catalog": read_catalog,
    "inspect": lambda p: tensorfile.inspect(str(p)),
    "structural_hash": lambda p: tensorfile.structural_hash(str(p)),
    "diff": lambda p: tensorfile.diff(str(p), str(p)),
    "read_metadata": lambda p: ops.metadata.read_metadata(str(p)),
    "edit_metadata": lambda p: ops.metadata.edit_metadata(str(p), set={"a": "b"}),
}
"""Every way a local path goes through detection."""


def _raises(fn: Callable[[], Any]) -> BaseException:
    with pytest.raises(TensorFileError) as info:
        fn()
    return info.value


# -- what is recognised ---------------------------------------------------------------------


def test_each_format_is_recognised_by_content_not_name(tmp_path: Path) -> None:
    st_blob = save({"w": ARR})
    zt_blob = write_zt(tmp_path / "m.zt", {"w": ARR}).read_bytes()
    gg_blob = write_gguf(tmp_path / "m.gguf", {"w": ARR}).read_bytes()
    for blob, fmt in ((st_blob, SAFETENSORS), (zt_blob, ZTENSOR), (gg_blob, GGUF)):
        assert detect(MemorySource(blob)) is fmt
        for suffix in (".safetensors", ".zt", ".gguf", ".bin", ""):  # every name: same answer
            path = tmp_path / f"as-{fmt.name}{suffix}"
            path.write_bytes(blob)
            with tensorfile.open(path) as r:
                assert r.format == fmt.name
                np.testing.assert_array_equal(r.get_tensor("w"), ARR)
            assert read_catalog(str(path)).format == fmt.name
            assert tensorfile.inspect(str(path)).format == fmt.name


def test_gguf_written_by_the_reference_opens_read_only(tmp_path: Path) -> None:
    path = write_gguf(
        tmp_path / "model.safetensors",  # a GGUF file with a safetensors name: content wins
        {"tok_embd.weight": ARR, "norm": np.ones(4, np.float32)},
        kv=[("add_uint32", "llama.block_count", 2)],
    )
    with tensorfile.open(path) as r:
        assert (r.format, sorted(r.keys())) == ("gguf", ["norm", "tok_embd.weight"])
        np.testing.assert_array_equal(r.get_tensor("tok_embd.weight"), ARR)
        assert (
            r.metadata["llama.block_count"] == 2
            and r.typed_metadata["llama.block_count"].type == "uint32"
        )
    assert not GGUF.editable
    with pytest.raises(UnsupportedError, match="read-only"):
        ops.metadata.edit_metadata(str(path), set={"a": "b"})


def test_detection_reads_only_the_head() -> None:
    src = MemorySource(save({"w": np.zeros(100_000, np.float32)}))
    assert detect(src) is SAFETENSORS
    assert src.stats.bytes_read == DETECT_BYTES


def test_a_safetensors_header_is_a_length_then_a_brace() -> None:
    assert detect(MemorySource(struct.pack("<Q", 2) + b"{}")) is SAFETENSORS
    # a length the file cannot hold, or over the limit: the reader says which
    assert detect(MemorySource(struct.pack("<Q", 2**31) + b'{"a"')) is SAFETENSORS
    with pytest.raises(HeaderTooLargeError):
        tensorfile.open(struct.pack("<Q", 2**31) + b'{"a"')
    # ... but a length whose high bytes are set is no length: bytes, not a header
    err = _raises(lambda: tensorfile.open(b"\xff" * 8 + b"{" + bytes(40)))
    assert isinstance(err, UnknownFormatError) and not isinstance(err, SafetensorError)


@pytest.mark.parametrize("lead", [b" ", b"\n\t ", b" " * 100, b"\r\n"])
@pytest.mark.parametrize("start", [b"{", b"["])
def test_whitespace_before_the_header_is_safetensors_refused_by_its_reader(
    lead: bytes, start: bytes
) -> None:
    """The reference's JSON parser skips leading whitespace; tensorfile's reader, like the
    spec, wants '{' at byte 8. Detection takes such a file for safetensors so that the
    reader's error says exactly that (and safe_open agrees)."""
    header = lead + start + (b"}" if start == b"{" else b"]")
    blob = struct.pack("<Q", len(header)) + header
    assert detect(MemorySource(blob)) is SAFETENSORS
    for fn in (lambda: tensorfile.open(blob), lambda: safe_open_bytes(blob)):
        err = _raises(fn)
        assert isinstance(err, HeaderSyntaxError), err
        assert "must begin with '{' (byte 8)" in str(err)


def safe_open_bytes(blob: bytes) -> Any:
    from tensorfile.safetensors import deserialize

    return deserialize(blob)


# -- zTensor v2 -------------------------------------------------------------------------------


def test_ztensor_v2_is_recognised_and_read(tmp_path: Path) -> None:
    """A v2 file (here a data shard: a container with no manifest) is the ztensor format and
    opens everywhere, with no tensors; only an edit of its (absent) attributes is refused."""
    path = tmp_path / "model.zt"
    path.write_bytes(V2)
    assert detect(MemorySource(V2)) is ZTENSOR
    for name, fn in OPENERS.items():
        if name == "edit_metadata":
            err = _raises(lambda fn=fn: fn(path))
            assert isinstance(err, ZTensorError) and "data shard" in str(err), name
            continue
        fn(path)
    with tensorfile.open(path) as f:
        assert f.format == "ztensor" and f.keys() == [] and f.catalog.version == "2"
    # damaged after the first four bytes (a line-ending translation): the v2 reader says so
    err = _raises(lambda: tensorfile.open(b"\x89ZT2\n\x1a\n" + bytes(64)))
    assert isinstance(err, ZTensorError) and "not a zTensor v2 file" in str(err)
    with tensorfile.open(path, format="ztensor") as f:
        assert f.keys() == []


@pytest.mark.parametrize("name", ["model.safetensors.index.json", "index.json", "weights"])
def test_a_sharded_checkpoint_index_is_named_with_its_shards(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(json.dumps(INDEX, indent=2))
    openers = ("tensorfile.open", "read_catalog")
    if name.endswith(".index.json"):  # tensorfile.open reads a checkpoint by its index's name
        with tensorfile.open(path) as ck:
            assert isinstance(ck, tensorfile.ShardedReader)
            assert ck.keys() == sorted(INDEX["weight_map"])
        openers = ("read_catalog",)
    for opener in openers:
        err = _raises(lambda opener=opener: OPENERS[opener](path))
        assert isinstance(err, UnsupportedError) and not isinstance(err, FormatError)
        message = str(err)
        assert message.startswith(f"{path} is a sharded checkpoint index")
        assert "naming 2 shards (model-00001-of-00002.safetensors, " in message
        assert "open the shards themselves" in message


def test_index_messages_stay_short_and_printable() -> None:
    many = {"weight_map": {f"t{i}": f"shard-{i}\n\x1b[31m.safetensors" for i in range(50)}}
    message = str(_raises(lambda: tensorfile.open(json.dumps(many).encode())))
    assert "naming 50 shards" in message and "and 47 more" in message
    assert message.isprintable() and len(message) < 500
    one = {"metadata": {}, "weight_map": {"a": "m.safetensors"}}
    assert "naming 1 shard (m.safetensors)" in str(_raises(lambda: tensorfile.open(
        json.dumps(one).encode())))  # fmt: skip
    empty = b'\xef\xbb\xbf {"weight_map": {}}'  # a byte order mark, no shards
    assert "naming 0 shards, not" in str(_raises(lambda: tensorfile.open(empty)))


def test_a_large_index_is_found_by_its_weight_map_key() -> None:
    big = {"weight_map": {f"layer.{i}.weight": f"m-{i % 7}.safetensors" for i in range(40_000)}}
    blob = json.dumps(big).encode()
    assert len(blob) > 1 << 20
    assert "naming 7 shards" in str(_raises(lambda: tensorfile.open(blob)))
    # a large JSON document that does not start like an index is not read whole
    other = MemorySource(json.dumps({"data": list(range(300_000))}).encode())
    err = _raises(lambda: detect(other))
    assert isinstance(err, UnknownFormatError) and "looks like a JSON document" in str(err)
    assert other.stats.bytes_read <= DETECT_BYTES + 4096


# -- not a tensor file ------------------------------------------------------------------------


def test_an_html_page_is_named(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(HTML)
    for name, fn in OPENERS.items():
        err = _raises(lambda fn=fn: fn(path))
        assert isinstance(err, UnknownFormatError), (name, err)
        message = str(err)
        assert "looks like an HTML page, not a tensor file" in message, name
        assert str(path) in message and "b'<!DOCTYPE html>\\n'..." in message, name
        assert message.count(str(path)) == 1, name  # the operations do not name it twice
    err = _raises(lambda: tensorfile.open(path))
    assert isinstance(err, UnknownFormatError)
    assert (err.path, err.head, err.size, err.format) == (str(path), HTML[:16], len(HTML), None)
    assert (err.offset, err.tensor) == (0, None)
    for variant in (b"\xef\xbb\xbf\n  <html><body>x</body></html>", b"<!doctype HTML>" * 3):
        assert "an HTML page" in str(_raises(lambda v=variant: tensorfile.open(v)))


@pytest.mark.parametrize(
    ("blob", "words"),
    [
        (b'{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}', "a JSON document"),
        (
            b"version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 9\n",
            "a Git LFS pointer",
        ),
        (b"PK\x03\x04" + bytes(60), "a zip archive"),
        (b"\x80\x02}q\x00" + bytes(60), "a Python pickle"),
        (b"\x93NUMPY\x01\x00" + bytes(60), "a NumPy .npy array"),
        (b'<?xml version="1.0"?><Error><Code>AccessDenied</Code></Error>', "an XML document"),
        (b"hello, this is not a model file\n", "a text file"),
        ("süßer Text über Modelle\n".encode(), "a text file"),
    ],
)
def test_common_non_tensor_files_are_named(blob: bytes, words: str) -> None:
    err = _raises(lambda: tensorfile.open(blob))
    assert isinstance(err, UnknownFormatError)
    assert f"looks like {words}" in str(err)
    assert (
        "not a tensor file tensorfile knows (safetensors, zTensor, GGUF, npz, npy, PyTorch pickle)"
        in str(err)
    )


def test_random_bytes_show_their_first_bytes(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    path.write_bytes(bytes(range(256)) * 4)
    message = str(_raises(lambda: tensorfile.open(path)))
    assert message == (
        f"{path} is not a tensor file tensorfile knows (safetensors, zTensor, GGUF, npz, npy, "
        "PyTorch pickle): its first "
        "16 of 1,024 bytes are b'\\x00\\x01\\x02\\x03\\x04\\x05\\x06\\x07\\x08\\t\\n\\x0b\\x0c\\r"
        "\\x0e\\x0f'..."
    )


def test_an_empty_file_says_so(tmp_path: Path) -> None:
    path = tmp_path / "empty.safetensors"
    path.write_bytes(b"")
    for name, fn in OPENERS.items():
        err = _raises(lambda fn=fn: fn(path))
        assert isinstance(err, UnknownFormatError), name
        assert str(err) == (
            f"{path} is empty (0 bytes), not a tensor file tensorfile knows "
            "(safetensors, zTensor, GGUF, npz, npy, PyTorch pickle)"
        ), name


@pytest.mark.parametrize("size", range(1, 10))
def test_files_shorter_than_any_format_say_so(tmp_path: Path, size: int) -> None:
    blob = b"\x07\xfe0123456789"[:size]
    path = tmp_path / "short.bin"
    path.write_bytes(blob)
    err = _raises(lambda: tensorfile.open(path))
    assert isinstance(err, UnknownFormatError)
    assert f"it is only {size} byte{'s' if size > 1 else ''} long ({blob!r})" in str(err)
    assert "too short for any of them" in str(err)


@pytest.mark.parametrize("blob", [b"G", b"GG", b"GGU", b"ZTE", b"\x89ZT", b"{", b"\x02\x00"])
def test_prefixes_of_a_magic_are_too_short(blob: bytes) -> None:
    assert "too short" in str(_raises(lambda: tensorfile.open(blob)))


def test_a_whole_magic_goes_to_its_reader_however_short() -> None:
    with pytest.raises(GGUFError):
        tensorfile.open(b"GGUF")
    with pytest.raises(ZTensorError, match="too short"):
        tensorfile.open(b"ZTEN1000")


def test_format_argument_skips_detection(tmp_path: Path) -> None:
    path = tmp_path / "page.html"
    path.write_bytes(HTML)
    for fn in (tensorfile.open, read_catalog):
        err = _raises(lambda fn=fn: fn(path, format="safetensors"))
        assert isinstance(err, HeaderTooLargeError), err  # the safetensors reader's own words
        with pytest.raises(GGUFError):
            fn(path, format="gguf")
    good = write_safetensors(tmp_path / "good.bin", {"w": ARR})
    with tensorfile.open(good, format="safetensors") as r:
        np.testing.assert_array_equal(r.get_tensor("w"), ARR)


def test_the_drop_in_never_detects(tmp_path: Path) -> None:
    """safe_open keeps the reference's safetensors errors, whatever the bytes are."""
    cases = {
        "page.safetensors": (HTML, HeaderTooLargeError),
        "index.safetensors": (json.dumps(INDEX).encode(), HeaderTooLargeError),
        "v2.safetensors": (V2, HeaderTooLargeError),
    }
    for name, (blob, cls) in cases.items():
        path = tmp_path / name
        path.write_bytes(blob)
        with pytest.raises(cls):
            safe_open(str(path), framework="np")
    gg = write_gguf(tmp_path / "g.safetensors", {"w": ARR})
    with pytest.raises(SafetensorError):
        safe_open(str(gg), framework="np")
    empty = tmp_path / "e.safetensors"
    empty.write_bytes(b"")
    with pytest.raises(SafetensorError) as info:
        safe_open(str(empty), framework="np")
    assert not isinstance(info.value, UnknownFormatError)


# -- arbitrary bytes --------------------------------------------------------------------------

FUZZ = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_PREFIXES = [
    b"",
    b"GGUF",
    b"ZTEN1000",
    ZTENSOR_V2_MAGIC,
    b"<html>",
    b'{"weight_map": ',
    b"version https://git-lfs",
    *(struct.pack("<Q", n) + b"{" for n in HOSTILE_U64),
    *(struct.pack("<Q", n) + b"  " for n in HOSTILE_U64),
]
BLOBS = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda p, rest: p + rest, st.sampled_from(_PREFIXES), st.binary(max_size=200)),
)


def _open_and_close(blob: bytes) -> None:
    try:
        with tensorfile.open(blob) as r:
            _ = r.keys(), dict(r.metadata)
    except TensorFileError as exc:
        message = str(exc)
        assert message and len(message) < 2000 and "\n" not in message.replace("\\n", ""), message


@FUZZ
@given(BLOBS)
def test_arbitrary_bytes_give_a_reader_or_a_tensorfile_error(blob: bytes) -> None:
    """Nothing but a TensorFileError escapes, in memory bounded by the bytes given (never by
    a size they claim)."""
    tracemalloc.start()
    try:
        _open_and_close(blob)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < (1 << 20) + 64 * len(blob), peak


@FUZZ
@given(st.binary(min_size=1, max_size=200))
def test_what_detection_refuses_is_unknown_or_unsupported(blob: bytes) -> None:
    found: Any
    try:
        found = detect(MemorySource(blob))
    except TensorFileError as exc:
        found = exc
    if isinstance(found, UnknownFormatError):
        assert (found.head, found.size) == (blob[:16], len(blob))
    elif isinstance(found, UnsupportedError):
        assert "sharded checkpoint index" in str(found)
    else:
        assert found in (SAFETENSORS, ZTENSOR, GGUF)


# -- over HTTP ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("detect-http")
    root = tmp / "www"
    root.mkdir()
    srv, stopper = start_range_server(root, tmp / "access.log")
    yield srv
    stopper.terminate()


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv, stopper = start_plain_server(tmp_path_factory.mktemp("detect-plain"))
    yield srv
    stopper.terminate()


def _put(srv: Server, name: str, blob: bytes) -> str:
    (srv.root / name).write_bytes(blob)
    return f"{srv.url}/{name}"


@pytest.mark.parametrize("name", ["m.safetensors", "m.zt", "m.gguf", "m"])
def test_over_http_each_case_is_named_whatever_the_name(server: Server, name: str) -> None:
    stem = name.replace(".", "-")
    html = _put(server, f"html-{stem}-{name}", HTML)
    index = _put(server, f"index-{stem}-{name}", json.dumps(INDEX).encode())
    v2 = _put(server, f"v2-{stem}-{name}", V2)
    empty = _put(server, f"empty-{stem}-{name}", b"")
    err = _raises(lambda: tensorfile.open(html))
    assert isinstance(err, UnknownFormatError) and "looks like an HTML page" in str(err)
    assert html in str(err)
    assert "naming 2 shards" in str(_raises(lambda: tensorfile.open(index)))
    assert read_catalog(v2).version == "2" and not read_catalog(v2).tensors  # a data shard
    err = _raises(lambda: tensorfile.open(empty))
    assert isinstance(err, UnknownFormatError) and f"{empty} is empty (0 bytes)" in str(err)


@pytest.mark.parametrize("fmt", ["safetensors", "gguf"])
def test_over_http_a_wrong_tail_first_hint_still_reads_from_the_head(
    server: Server, tmp_path: Path, fmt: str
) -> None:
    """A file named .zt makes the first request a suffix; a large safetensors or GGUF file
    behind that name is still detected from its head (one more request) and read."""
    big = np.arange(60_000, dtype=np.float32).reshape(300, 200)  # 240 kB: the tail misses
    src = tmp_path / f"big.{fmt}"
    if fmt == "safetensors":
        write_safetensors(src, {"w": big})
    else:
        write_gguf(src, {"w": big})
    url = _put(server, f"really-{fmt}.zt", src.read_bytes())
    server.reset()
    with tensorfile.open(url) as r:
        assert r.format == fmt
        np.testing.assert_array_equal(r.get_tensor("w"), big)
    ranges = [q.range for q in server.requests()]
    assert ranges[0] == "bytes=-100000", ranges  # the hint's suffix request came first
    assert "bytes=0-63" in ranges, ranges  # then the head (kept), for detection
    html = _put(server, "page.zt", HTML * 2000)  # an HTML page larger than the first read
    assert "looks like an HTML page" in str(_raises(lambda: tensorfile.open(html)))


def test_over_http_a_directory_listing_is_named(plain: Server) -> None:
    (plain.root / "models").mkdir()
    (plain.root / "models" / "model.safetensors").write_bytes(save({"w": ARR}))
    err = _raises(lambda: tensorfile.open(f"{plain.url}/models/"))
    assert isinstance(err, UnknownFormatError)
    assert "looks like an HTML page, not a tensor file" in str(err)
    with tensorfile.open(f"{plain.url}/models/model.safetensors") as r:
        np.testing.assert_array_equal(r.get_tensor("w"), ARR)


def test_formats_module_exports_the_v2_magic() -> None:
    assert bytes.fromhex("895A54320D0A1A0A") == ZTENSOR_V2_MAGIC
    assert formats.DETECT_BYTES == 9
