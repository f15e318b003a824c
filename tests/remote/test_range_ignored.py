"""Servers that ignore Range (``python -m http.server``, the ``plain`` fixture) and web pages
where a tensor file should be: a small file is read whole, a big one as far as needed, never
more than the limit unless allowed, and what was read is kept; a directory listing is "not a
tensor file", whatever reads it."""

from __future__ import annotations

import json
import socket
import struct
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensorfile
from tensorfile import ztensor
from tensorfile.core.source import RangeRequest, SuffixRequest
from tensorfile.errors import SafetensorError, SourceError, UnknownFormatError
from tensorfile.safetensors import safe_open
from tensorfile.safetensors.numpy import load_file as load_file_np
from tensorfile.safetensors.numpy import save, save_file
from tensorfile.sources import HTTPSource, RangeIgnoredWarning, open_path
from tensorfile.sources.http import _prefix
from tensorfile.sources.http.remote import SPECULATIVE_BYTES
from tests.helpers.checkpoints import write_gguf
from tests.helpers.hostile_http import HostileServer, Request, reply, serve_bytes, stream_zeros
from tests.helpers.servers import start_plain_server

LIMIT = _prefix.FULL_DOWNLOAD_LIMIT


def _tensors(n: int, width: int) -> dict[str, np.ndarray]:
    return {f"t{i}": np.full(width, i, np.float32) for i in range(n)}


def _sparse_safetensors(path: Path, size: int) -> int:
    """A valid safetensors file of ``size`` bytes (one U8 tensor, written sparsely)."""
    hlen = 128
    n_data = size - 8 - hlen
    header = json.dumps({"big": {"dtype": "U8", "shape": [n_data], "data_offsets": [0, n_data]}})
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", hlen) + header.ljust(hlen).encode())
        f.truncate(size)
    return n_data


# -- a small file is read whole, as far as needed, and kept ----------------------------------


def test_a_726_kb_gguf_is_read_from_a_server_that_ignores_range(plain: Any) -> None:
    arrays = _tensors(10, 18_000)  # 720 kB of tensors: most of them past the first 100 kB
    path = write_gguf(plain.root / "model.gguf", arrays)
    assert 700_000 < path.stat().st_size < 800_000
    plain.reset()
    with tensorfile.open(f"{plain.url}/model.gguf") as f:
        assert f.format == "gguf"
        for name, arr in arrays.items():
            np.testing.assert_array_equal(f.get_tensor(name), arr)
        requests, read = f.source.stats.requests, f.source.stats.bytes_read
        for name in arrays:  # everything is kept now: no request more
            f.get_tensor(name)
        assert f.source.stats.requests == requests
    size = path.stat().st_size
    # the prefix at least doubles each time: a few requests, not one per tensor
    assert requests <= 5, requests
    assert read <= 3 * size, (read, size)


def test_each_reply_is_read_only_as_far_as_needed(plain: Any) -> None:
    arrays = _tensors(10, 18_000)
    save_file(arrays, str(plain.root / "m.safetensors"))
    with HTTPSource(f"{plain.url}/m.safetensors") as src:
        assert src.stats.bytes_read == SPECULATIVE_BYTES  # of 720 kB sent
        assert src.read(150_000, 10) == (plain.root / "m.safetensors").read_bytes()[150_000:150_010]
        assert src.stats.requests == 2
        assert src.stats.bytes_read == SPECULATIVE_BYTES + 2 * SPECULATIVE_BYTES  # 0-199,999
        src.read(190_000, 10_000)
        assert src.stats.requests == 2  # inside what was kept


def test_a_ztensor_file_whose_index_is_at_the_end(plain: Any) -> None:
    arrays = _tensors(10, 20_000)  # 800 kB: the suffix request needs all of it
    ztensor.save_file(arrays, str(plain.root / "m.zt"))
    with tensorfile.open(f"{plain.url}/m.zt") as f:
        assert sorted(f.keys()) == sorted(arrays)
        np.testing.assert_array_equal(f.get_tensor("t9"), arrays["t9"])
        assert f.source.stats.requests == 1


@pytest.mark.filterwarnings(
    "ignore::tensorfile.sources.RangeIgnoredWarning"
)  # reads 80 kB of 1.3 MB
def test_threads_share_what_was_kept(plain: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    arrays = _tensors(16, 20_000)
    save_file(arrays, str(plain.root / "threads.safetensors"))
    with tensorfile.open(f"{plain.url}/threads.safetensors") as f:
        with ThreadPoolExecutor(4) as pool:
            got = dict(zip(arrays, pool.map(f.get_tensor, arrays), strict=True))
    for name, arr in arrays.items():
        np.testing.assert_array_equal(got[name], arr)


# -- a big file: as far as the limit, or all of it when allowed ------------------------------


@pytest.fixture
def big(plain: Any) -> tuple[str, int]:
    """A file just over the limit, whose tensor ends past it."""
    n_data = _sparse_safetensors(plain.root / "big.safetensors", LIMIT + (4 << 20))
    plain.reset()
    return f"{plain.url}/big.safetensors", n_data


def test_a_file_over_the_limit_is_refused_with_the_option_named(big: Any, plain: Any) -> None:
    url, n_data = big
    with tensorfile.open(url) as f:
        assert f.info("big").shape == (n_data,)  # the header is in the first 100 kB
        t0 = time.monotonic()
        with pytest.raises(SourceError) as info:
            f.get_tensor("big")
        assert time.monotonic() - t0 < 5  # refused before the body is read
    message = str(info.value)
    assert "ignores Range" in message and "allow_full_download=True" in message
    assert "TENSORFILE_ALLOW_FULL_DOWNLOAD=1" in message and f"{LIMIT:,}" in message
    assert sum(plain.sent) <= SPECULATIVE_BYTES + (16 << 20), plain.sent


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_a_file_over_the_limit_is_read_when_allowed(big: Any, how: str, monkeypatch: Any) -> None:
    url, n_data = big
    if how == "environment":
        monkeypatch.setenv("TENSORFILE_ALLOW_FULL_DOWNLOAD", "1")
        options = {}
    else:
        options = {"allow_full_download": True}
    with tensorfile.open(url, **options) as f:
        data = f.get_tensor("big")
        assert data.shape == (n_data,) and not data.any()
        assert f.source.stats.requests == 2


def test_allow_full_download_false_wins_over_the_environment(big: Any, monkeypatch: Any) -> None:
    url, _ = big
    monkeypatch.setenv("TENSORFILE_ALLOW_FULL_DOWNLOAD", "1")
    with tensorfile.open(url, allow_full_download=False) as f:
        with pytest.raises(SourceError, match="allow_full_download"):
            f.get_tensor("big")


def test_allow_full_download_must_be_a_bool(plain: Any) -> None:
    from tensorfile.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="allow_full_download"):
        open_path(f"{plain.url}/x.safetensors", allow_full_download="yes")  # type: ignore[arg-type]


def test_a_ztensor_file_over_the_limit_is_refused_whole(plain: Any) -> None:
    with open(plain.root / "big.zt", "wb") as f:
        f.truncate(LIMIT + 1)
    with pytest.raises(SourceError, match="needs all of its 67,108,865 bytes"):
        HTTPSource(f"{plain.url}/big.zt", first=SuffixRequest(SPECULATIVE_BYTES))


# -- lying and odd whole-file replies ---------------------------------------------------------


def _open(server: HostileServer, **options: Any) -> HTTPSource:
    return HTTPSource(f"{server.url}/m.bin", **({"retries": 0, "timeout": 5} | options))


def test_a_body_shorter_than_its_content_length_is_refused() -> None:
    def respond(request: Request, conn: socket.socket) -> bool:
        conn.sendall(reply(200, {"Content-Length": "1000000"}, b"x" * 50_000))
        return False

    with HostileServer(respond) as server:
        with pytest.raises(SourceError, match=r"ended after 50,000 bytes .* Content-Length is"):
            _open(server)


def test_a_body_longer_than_its_content_length_is_refused() -> None:
    body = save({"a": np.arange(4, dtype=np.int32)})

    def respond(request: Request, conn: socket.socket) -> bool:
        conn.sendall(reply(200, {"Content-Length": str(len(body))}, body + bytes(150_000)))
        time.sleep(0.5)  # keep the connection open: the extra bytes wait on it
        return False

    with HostileServer(respond) as server:
        t0 = time.monotonic()
        with pytest.raises(SourceError, match=f"more than the {len(body)} bytes"):
            _open(server)
        assert time.monotonic() - t0 < 5


def test_a_claimed_size_is_never_allocated() -> None:
    """The server claims 2**62 bytes and streams zeros: 100 kB are read; a read far away is
    refused before its body is read."""

    def respond(request: Request, conn: socket.socket) -> bool:
        conn.sendall(reply(200, {"Content-Length": str(1 << 62)}))
        stream_zeros(conn, 8 << 20, server)
        return False

    with HostileServer(respond) as server:
        src = _open(server)
        assert src.size == 1 << 62 and src.stats.bytes_read == SPECULATIVE_BYTES
        with pytest.raises(SourceError, match="allow_full_download"):
            src.read(1 << 40, 10)


def test_a_body_without_length_is_read_to_its_end_within_the_limit(monkeypatch: Any) -> None:
    data = save({"a": np.arange(1000, dtype=np.int64)})
    endless = [False]

    def respond(request: Request, conn: socket.socket) -> bool:
        conn.sendall(reply(200, {"Connection": "close"}, b"" if endless[0] else data))
        if endless[0]:
            stream_zeros(conn, 8 << 20, server)
        return False

    monkeypatch.setattr(_prefix, "FULL_DOWNLOAD_LIMIT", 1 << 20)
    with HostileServer(respond) as server:
        with tensorfile.open(f"{server.url}/m.bin") as f:
            assert f.get_tensor("a").tolist() == list(range(1000))
            assert f.source.size == len(data) and f.source.stats.requests == 1
        endless[0] = True
        with pytest.raises(SourceError, match=r"no Content-Length.*allow_full_download"):
            _open(server)


def test_a_file_that_changes_between_replies_is_refused() -> None:
    versions = [bytes(range(256)) * 1000, bytes(reversed(range(256))) * 1000]

    def respond(request: Request, conn: socket.socket) -> bool:
        data = versions[min(len(server.requests), 2) - 1]
        conn.sendall(reply(200, {"Content-Length": str(len(data))}, data))
        return False

    with HostileServer(respond) as server:
        src = _open(server)
        with pytest.raises(SourceError, match="the file changed while it was read"):
            src.read(200_000, 10)


# -- a web page where a tensor file should be --------------------------------------------------


def test_a_directory_listing_is_not_a_tensor_file(plain: Any) -> None:
    (plain.root / "listed").mkdir(exist_ok=True)
    save_file(_tensors(1, 4), str(plain.root / "listed" / "m.safetensors"))
    url = f"{plain.url}/listed/?token=s3cret"
    with pytest.raises(UnknownFormatError) as info:
        tensorfile.open(url)
    message = str(info.value)
    assert message.startswith(f"{plain.url}/listed/ looks like an HTML page, not a tensor file")
    assert "text/html" in message and "directory listing" in message and "s3cret" not in message
    assert isinstance(info.value, SourceError)
    for read in (
        lambda: tensorfile.open(url, format="safetensors"),
        lambda: tensorfile.open(url, format="gguf"),
        lambda: safe_open(url, "numpy"),
        lambda: HTTPSource(f"{plain.url}/listed"),  # redirected to /listed/ first
    ):
        with pytest.raises(SourceError, match="looks like an HTML page, not a tensor file"):
            read()
    with pytest.raises(SafetensorError, match="HTML page"):
        safe_open(url, "numpy")


def test_a_ztensor_url_serving_a_web_page_is_not_a_tensor_file() -> None:
    page = b"<!DOCTYPE html><html><body>" + b"x" * 200_000 + b"</body></html>"
    with HostileServer(_html(page, partial=True)) as server:
        with pytest.raises(UnknownFormatError, match="looks like an HTML page"):
            tensorfile.open(f"{server.url}/m.zt")  # the tail first, then the head: HTML


def _html(data: bytes, *, partial: bool) -> Any:
    def respond(request: Request, conn: socket.socket) -> bool:
        head = {"Content-Type": "text/html; charset=utf-8", "Content-Length": str(len(data))}
        rng = request.headers.get("range", "")
        if partial and rng.startswith("bytes=-"):
            n = min(int(rng[len("bytes=-") :]), len(data))
            head |= {"Content-Range": f"bytes {len(data) - n}-{len(data) - 1}/{len(data)}"}
            conn.sendall(reply(206, head | {"Content-Length": str(n)}, data[-n:]))
        elif partial:
            start, stop = (int(x) for x in rng[len("bytes=") :].split("-"))
            stop = min(stop + 1, len(data))
            head |= {"Content-Range": f"bytes {start}-{stop - 1}/{len(data)}"}
            conn.sendall(reply(206, head | {"Content-Length": str(stop - start)}, data[start:stop]))
        else:
            conn.sendall(reply(200, head, data))
        return False

    return respond


def test_a_tensor_file_labelled_text_html_is_still_read() -> None:
    data = save({"a": np.arange(3, dtype=np.int32)})
    for partial in (False, True):
        with HostileServer(_html(data, partial=partial)) as server:
            with tensorfile.open(f"{server.url}/m.safetensors") as f:
                assert f.get_tensor("a").tolist() == [0, 1, 2]


def test_an_html_looking_file_served_as_octet_stream_is_left_to_detection() -> None:
    page = b"<!DOCTYPE html><html></html>"
    with HostileServer(serve_bytes(page)) as server:
        src = HTTPSource(f"{server.url}/m.bin", retries=0)
        assert src.read(0, len(page)) == page
        with pytest.raises(UnknownFormatError, match="looks like an HTML page"):
            tensorfile.open(f"{server.url}/m.bin")


def test_prefix_reads_outside_the_file_are_not_served() -> None:
    p = _prefix.Prefix()
    assert p.serve(RangeRequest(0, 1)) is None
    p.keep(b"abc", 3)
    assert p.serve(SuffixRequest(2)) is not None and p.serve(RangeRequest(3, 4)) is None


def test_the_command_line_opts_in_with_a_flag(big: Any, capsys: Any, monkeypatch: Any) -> None:
    from tests.helpers.cli import assert_one_error, run

    url, _ = big
    monkeypatch.delenv("TENSORFILE_ALLOW_FULL_DOWNLOAD", raising=False)
    refused = run(capsys, "id", "--content", url)
    assert_one_error(refused, contains="--allow-full-download")
    allowed = run(capsys, "id", "--content", "--allow-full-download", url)
    assert allowed.code == 0, allowed.err
    assert "TENSORFILE_ALLOW_FULL_DOWNLOAD" not in __import__("os").environ  # restored


# -- a download far bigger than the read: warned, once per server ----------------------------


def _tensor_far_in(path: Path) -> np.ndarray:
    """A safetensors file whose last tensor (1.5 kB) lies 3 MB in, after a big one (one
    dtype: the writer orders them by name)."""
    small = (np.arange(1536) % 251).astype(np.uint8)
    save_file({"big": np.zeros(3_000_000, np.uint8), "small": small}, str(path))
    return small


def test_a_big_download_for_a_small_read_warns_once_per_server(tmp_path: Path) -> None:
    """A server that ignores Range made a 1.5 kB tensor cost the file's first 3 MB: allowed
    (under the 64 MiB limit), but said, once per origin in a process."""
    server, stopper = start_plain_server(tmp_path)
    try:
        small = _tensor_far_in(tmp_path / "a.safetensors")
        _tensor_far_in(tmp_path / "b.safetensors")
        with pytest.warns(RangeIgnoredWarning) as caught:
            with tensorfile.open(f"{server.url}/a.safetensors") as f:
                np.testing.assert_array_equal(f.get_tensor("small"), small)
        assert len(caught) == 1
        message = str(caught[0].message)
        assert message.startswith(f"{server.url}/a.safetensors: the server ignores Range"), message
        assert "reading 1,536 bytes of it downloaded its first 3," in message, message
        assert f"warned once for {server.url}" in message, message
        with warnings.catch_warnings():
            warnings.simplefilter("error", RangeIgnoredWarning)  # the same origin: once only
            with tensorfile.open(f"{server.url}/b.safetensors") as f:
                np.testing.assert_array_equal(f.get_tensor("small"), small)
    finally:
        stopper.terminate()


def test_reading_what_was_downloaded_does_not_warn(tmp_path: Path) -> None:
    """A whole load of the file needs every byte a whole-file reply sends: no warning."""
    server, stopper = start_plain_server(tmp_path)
    try:
        small = _tensor_far_in(tmp_path / "a.safetensors")
        with warnings.catch_warnings():
            warnings.simplefilter("error", RangeIgnoredWarning)
            loaded = load_file_np(f"{server.url}/a.safetensors")
        np.testing.assert_array_equal(loaded["small"], small)
    finally:
        stopper.terminate()
