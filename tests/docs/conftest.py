"""What the documentation's examples run against: the sample files (made once), a real HTTP
server with Range support behind ``https://example.com/``, and a real S3 API server (moto)
whose bucket ``examples`` holds the samples, for the pages that name ``s3://examples/``."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tensorfile.samples
from tests.helpers.servers import start_range_server


@pytest.fixture(scope="session")
def sample_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample files, made once per test session (each page gets a copy)."""
    made = tmp_path_factory.mktemp("doc-samples")
    tensorfile.samples.make(made)
    return made


@pytest.fixture(scope="session")
def pages_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding each page's own folder (the HTTP server serves it)."""
    return tmp_path_factory.mktemp("doc-pages")


@pytest.fixture(scope="session")
def http_base(pages_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of :func:`pages_root` on a real HTTP server (Range requests honoured, an
    ETag on every reply, as most servers send)."""
    log = tmp_path_factory.mktemp("doc-http") / "access.log"
    server, stopper = start_range_server(pages_root, log, etag=True)
    yield server.url
    stopper.terminate()


def upload_samples(s3: Any, folder: Path, bucket: str) -> None:
    """Empty ``bucket`` (made if missing) and put every file of ``folder`` in it."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=s3.endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    try:
        client.create_bucket(Bucket=bucket)
    except client.exceptions.BucketAlreadyOwnedByYou:
        listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
        for item in listed:
            client.delete_object(Bucket=bucket, Key=item["Key"])
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), bucket, path.relative_to(folder).as_posix())


def fresh_folder(root: Path, name: str) -> Path:
    """An empty folder ``root/name``."""
    folder = root / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder
