"""Ranged GETs are conditional on the version already read (issue 35): once a reply gave a
strong ``ETag``, every later request to that URL says ``If-Match: <ETag>``, so that the
server itself refuses to serve the bytes of another version, and its ``412 Precondition
Failed`` is the "file changed while it was being read" error. A weak ETag is never sent
(``If-Match`` compares strongly: it would never match), nor is one sent to another URL (the
first hop of a redirect); a server that sends no ETag is read as before."""

from __future__ import annotations

import os
import socket
from typing import Any

import numpy as np
import pytest

import tensorfile
from tensorfile.errors import SourceError
from tensorfile.safetensors.numpy import save_file
from tensorfile.sources import HTTPSource, open_path
from tests.helpers.hostile_http import HostileServer, Request, reply, serve_bytes

DATA = bytes(range(256)) * 1024  # 256 KiB: more than the first read


def _serve(tag: str | None) -> Any:
    """Honest ranges of DATA with ``tag`` as the ETag of every reply; ``/moved/<x>``
    redirects (302, not remembered) to ``/<x>``."""
    honest = serve_bytes(DATA, etag=tag)

    def respond(request: Request, conn: socket.socket) -> bool:
        if request.target.startswith("/moved/"):
            target = request.target[len("/moved") :]
            conn.sendall(reply(302, {"Location": target, "Content-Length": "0"}))
            return True
        return honest(request, conn)

    return respond


def _read_a_few(url: str) -> None:
    with HTTPSource(url, retries=0) as src:
        assert src.read(200_000, 10) == DATA[200_000:200_010]
        out = bytearray(50_000)
        src.readinto(100_000, [memoryview(out)])
        assert bytes(out) == DATA[100_000:150_000]


@pytest.mark.parametrize("path", ["/x.bin", "/moved/x.bin"])
def test_requests_after_the_first_etag_carry_if_match(path: str) -> None:
    """Every request after the reply that gave the ETag carries it, to the URL that gave it
    only: a redirect's first hop (another resource, with ETags of its own) gets none."""
    with HostileServer(_serve('"v1-abc"')) as server:
        _read_a_few(f"{server.url}{path}")
        sent = [(r.target, r.headers.get("if-match")) for r in server.requests]
    assert len(sent) >= 3
    if path == "/moved/x.bin":
        assert sent[:2] == [("/moved/x.bin", None), ("/x.bin", None)]
        later = sent[2:]
        assert {t for t, _ in later} == {"/moved/x.bin", "/x.bin"}
        assert all(tag is None for t, tag in later if t == "/moved/x.bin")
        assert all(tag == '"v1-abc"' for t, tag in later if t == "/x.bin")
    else:
        assert sent[0] == ("/x.bin", None)
        assert all(tag == '"v1-abc"' for _, tag in sent[1:]), sent


@pytest.mark.parametrize("tag", ['W/"v1"', "unquoted", None])
def test_weak_malformed_or_no_etag_sends_no_if_match(tag: str | None) -> None:
    with HostileServer(_serve(tag)) as server:
        _read_a_few(f"{server.url}/x.bin")
        assert len(server.requests) >= 3
        assert all("if-match" not in r.headers for r in server.requests)


def _model(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"w{i}": rng.standard_normal((64, 256)).astype(np.float32) for i in range(4)}


def test_a_file_replaced_mid_load_is_refused_by_the_server(nginx: Any) -> None:
    """nginx (a real server) answers 412 to a request whose If-Match no longer matches the
    file it serves: the load stops with the "changed" error, naming the ETag it read."""
    path = nginx.root / "replaced.safetensors"
    save_file(_model(0), str(path))
    with tensorfile.open(f"{nginx.url}/replaced.safetensors") as f:  # the header: ETag known
        first = f.source.version
        assert first is not None
        save_file(_model(1), str(path))
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**10))  # nginx's ETag: mtime
        with pytest.raises(SourceError) as err:
            f.get_tensor("w2")
    assert "the file changed while it was being read (HTTP 412: its ETag is no longer" in str(
        err.value
    )
    assert first in str(err.value)


def test_an_unchanged_file_loads_with_if_match(nginx: Any) -> None:
    """The same load of a file nobody replaces: every conditional request is answered."""
    model = _model(2)
    save_file(model, str(nginx.root / "kept.safetensors"))
    nginx.reset()
    with tensorfile.open(f"{nginx.url}/kept.safetensors") as f:
        assert f.source.version is not None
        got = f.get_tensors()
    logged = [r for r in nginx.requests() if r.uri == "/kept.safetensors"]
    assert len(logged) >= 2 and {r.status for r in logged} == {206}, logged
    assert list(got) == list(model)
    for name, arr in model.items():
        np.testing.assert_array_equal(got[name], arr)


def test_a_412_without_if_match_is_no_claim_of_a_change() -> None:
    """A 412 to a request that set no precondition says nothing about the file: the plain
    HTTP error, not "the file changed"."""

    def respond(request: Request, conn: socket.socket) -> bool:
        conn.sendall(reply(412, {"Content-Length": "0"}))
        return True

    with HostileServer(respond) as server, pytest.raises(SourceError) as err:
        HTTPSource(f"{server.url}/x.bin", retries=0)
    assert "HTTP 412" in str(err.value) and "changed" not in str(err.value)


def test_s3_an_object_replaced_mid_load_is_refused_by_the_store(s3_env: Any) -> None:
    """The native S3 client's signed ranged GETs carry If-Match too (unsigned: SigV4 signs
    its own headers); SeaweedFS, a real S3 server, serves them while the object is the same
    and answers 412 once it was replaced."""
    bucket = s3_env.place()
    data = os.urandom(1 << 20)
    s3_env.put(bucket, "m.bin", data)
    with open_path(f"s3://{bucket}/m.bin") as src:
        assert src.read(0, 10) == data[:10]  # the first reply: size and ETag learnt
        assert src.read(600_000, 10) == data[600_000:600_010]  # conditional, answered
        s3_env.put(bucket, "m.bin", os.urandom(1 << 20))
        with pytest.raises(SourceError) as err:
            src.readinto(500_000, [memoryview(bytearray(100_000))])
    assert "the file changed while it was being read (HTTP 412: its ETag is no longer" in str(
        err.value
    )
    assert s3_env.etag(bucket, "m.bin") not in str(err.value)  # the ETag read, not the new
