"""A real S3 API server on 127.0.0.1 for the object-store tests: moto in server mode.

moto's ``ThreadedMotoServer`` serves the S3 REST API over HTTP from a thread of the test
process (port 0: a free port); s3fs talks to it through ``endpoint_url`` as it would to AWS,
with fixed test credentials. Nothing of the client library is mocked: requests go over a
socket to the server, which keeps the objects in memory. Spark's executors reach the same
server over TCP with the same ``storage_options``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

CREDENTIALS = {"key": "testing", "secret": "testing"}


@dataclass
class S3Server:
    """The running server: its endpoint and the ``storage_options`` that reach it."""

    server: Any
    endpoint: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def fs(self) -> Any:
        """An s3fs filesystem on the server (fsspec caches the instance)."""
        import s3fs

        return s3fs.S3FileSystem(**self.options)

    def bucket(self) -> str:
        """A new, empty bucket; returns its name."""
        name = f"tf-{uuid.uuid4().hex[:12]}"
        self.fs.mkdir(name)
        return name

    def url(self, *parts: str) -> str:
        """``s3://`` URL of ``parts`` joined by ``/``."""
        return "s3://" + "/".join(parts)

    def options_json(self) -> str:
        """The ``storage_options`` option of the Spark data source."""
        return json.dumps(self.options)

    def keys(self, prefix: str) -> list[str]:
        """Every object key under ``prefix`` (recursively), relative to it, sorted."""
        fs = self.fs
        fs.invalidate_cache()
        root = prefix.rstrip("/") + "/"
        return sorted(k[len(root) :] for k in fs.find(prefix) if k.startswith(root))

    def stop(self) -> None:
        self.server.stop()

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[dict[str, Any]]]:
        """Record the requests the server receives in the block (moto's recorder): the list
        is filled when the block ends, one ``{"method", "url", "headers"}`` per request."""
        import requests

        base = f"{self.endpoint}/moto-api/recorder"
        requests.post(f"{base}/reset-recording", timeout=10).raise_for_status()
        requests.post(f"{base}/start-recording", timeout=10).raise_for_status()
        out: list[dict[str, Any]] = []
        try:
            yield out
        finally:
            requests.post(f"{base}/stop-recording", timeout=10).raise_for_status()
            text = requests.get(f"{base}/download-recording", timeout=10).text
            out.extend(json.loads(line) for line in text.splitlines() if line.strip())

    def bytes_read(self, requests: list[dict[str, Any]], key_suffix: str = "") -> dict[str, int]:
        """Bytes the GET requests recorded fetched, per object path (``/bucket/key``), for
        the objects whose path ends with ``key_suffix``: each ``Range`` asked for, cut at
        the object's end (a read of "up to N bytes" of a smaller object gets the object); a
        GET without ``Range`` counts the whole object."""
        out: dict[str, int] = {}
        sizes: dict[str, int] = {}
        for r in requests:
            if r["method"] != "GET":
                continue
            path = r["url"].split("?")[0]
            path = "/" + path.split("://", 1)[-1].split("/", 1)[-1]
            if not path.endswith(key_suffix) or path.endswith("/"):
                continue
            if path not in sizes:
                try:
                    sizes[path] = self.fs.size(path.lstrip("/"))
                except FileNotFoundError:
                    sizes[path] = 0  # (a 404 fetched nothing)
            size = sizes[path]
            rng = {k.lower(): v for k, v in r["headers"].items()}.get("range")
            if rng and rng.startswith("bytes="):
                first, _, last = rng[6:].partition("-")
                if not first:  # the last N bytes
                    n = min(int(last), size)
                else:
                    n = max(0, min(int(last) + 1 if last else size, size) - int(first))
            else:
                n = size
            out[path] = out.get(path, 0) + n
        return out


def start(folder: str | os.PathLike[str] | None = None) -> S3Server:
    """Start moto's S3 server on 127.0.0.1 (a free port); its recorder (see
    :meth:`S3Server.recording`) writes in ``folder`` (default: a new temporary folder)."""
    # read when moto is imported: the first server of the process decides
    if "MOTO_RECORDER_FILEPATH" not in os.environ:
        folder = tempfile.mkdtemp() if folder is None else folder
        os.environ["MOTO_RECORDER_FILEPATH"] = os.path.join(folder, "moto-recording.jsonl")
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    options = {
        "endpoint_url": endpoint,
        **CREDENTIALS,
        "config_kwargs": {"retries": {"max_attempts": 2}, "connect_timeout": 5},
    }
    return S3Server(server, endpoint, options)
