"""Issue 35, finding f08: no command prints a URL's credentials or query string.

The help says "Credentials in a URL are never printed", and ``id``, ``inspect``,
``summary``, ``diff`` and ``meta`` showed a URL redacted, but ``verify`` (its report line,
its failures, ``--json``'s ``path``) and ``convert`` (its summary line, ``--json``'s
``src``) repeated the URL as given: ``user:password@`` and a presigned signature or token
went to the terminal, CI logs and JSON consumers. So did ``meta --set`` on a URL (its
error), ``convert`` to a URL (its error) and ``dataset gc`` on an fsspec URL.

Here every command that takes a URL runs on one that carries a user, a password and a
presigned query, served by a real HTTP server on 127.0.0.1, in text and ``--json``, on a
good file, a corrupt one, a missing one and a sharded checkpoint; no secret may appear on
stdout or stderr.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensorfile import dataset
from tensorfile.sources import redact
from tests.helpers.checkpoints import write_safetensors, write_sharded, write_zt
from tests.helpers.cli import run
from tests.helpers.datasets import cols_a
from tests.helpers.servers import Server, start_range_server

USER, PASSWORD = "alice-f08-user", "PASSWORD-f08-pw"
QUERY = "?X-Amz-Signature=SIGNATURE-f08-sig&X-Amz-Credential=AKIAF08KEY&token=TOKEN-f08"
SECRETS = (USER, PASSWORD, "SIGNATURE-f08", "AKIAF08KEY", "TOKEN-f08", "X-Amz", "token=")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A range server holding a good safetensors file, a zTensor file with digests, a copy
    of it with one data byte flipped, and a sharded checkpoint."""
    tmp = tmp_path_factory.mktemp("url-secrets")
    root = tmp / "www"
    root.mkdir()
    write_safetensors(root / "m.safetensors")
    write_zt(root / "m.zt", checksum="crc32c")
    raw = bytearray((root / "m.zt").read_bytes())
    raw[100] ^= 1  # inside lm_head.weight's data: its crc32c no longer matches
    (root / "bad.zt").write_bytes(bytes(raw))
    write_sharded(root / "ck", [{"a": np.ones(3, np.float32)}, {"b": np.zeros(2, np.float32)}])
    srv, stopper = start_range_server(root, tmp / "access.log")
    yield srv
    stopper.terminate()


def _url(server: Server, name: str) -> str:
    return server.url.replace("http://", f"http://{USER}:{PASSWORD}@") + f"/{name}{QUERY}"


def _commands(server: Server, out: Path) -> list[tuple[list[str], int]]:
    """Every command that reads a URL, with the exit status it ends with."""
    good, zt, bad = (_url(server, n) for n in ("m.safetensors", "m.zt", "bad.zt"))
    missing, index = _url(server, "missing.zt"), _url(server, "ck/model.safetensors.index.json")
    return [
        (["inspect", good], 0),
        (["inspect", "--tree", "--verbose", zt], 0),
        (["inspect", index], 0),
        (["inspect", good, missing], 2),
        (["id", good], 0),
        (["id", "--content", "--verify", zt], 0),
        (["id", "--content", "--digest", "crc32c", "--trust-stored-digests", zt], 0),
        (["id", "--content", "--verify", bad], 2),
        (["summary", good, index, missing], 2),
        (["diff", "--verbose", good, zt], 0),
        (["diff", "--data", "--format", "md", good, bad], 2),
        (["meta", good, zt], 0),
        (["meta", good, "--set", "k=v"], 2),
        (["convert", good, str(out / "a.zt")], 0),
        (["convert", index, str(out / "b.safetensors")], 0),
        (["convert", bad, str(out / "c.safetensors")], 2),
        (["convert", missing, str(out / "d.safetensors")], 2),
        (["convert", str(server.root / "m.safetensors"), _url(server, "e.zt")], 2),
        (["verify", good], 0),
        (["verify", "--deep", "--strict", zt], 0),
        (["verify", index], 0),
        (["verify", bad], 1),
        (["verify", missing, zt], 2),
        (["dataset", "gc", _url(server, "ds")], 2),
    ]


def _leaked(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


@pytest.mark.parametrize("json_mode", [False, True], ids=["text", "json"])
def test_no_command_prints_a_urls_credentials_or_query(
    server: Server, tmp_path: Path, capsys: Any, json_mode: bool
) -> None:
    shown = redact(_url(server, "m.safetensors"))
    assert shown == f"{server.url}/m.safetensors"
    wrong = []
    for argv, code in _commands(server, tmp_path):
        r = run(capsys, *argv, *(["--json"] if json_mode else []))
        assert r.code == code, (argv, r)
        if _leaked(r.out + r.err):  # every command that shows one, not only the first
            wrong.append(
                (argv[:2], [line for line in (r.out + r.err).splitlines() if _leaked(line)])
            )
    assert not wrong, wrong
    # the commands that name their source name it redacted
    r = run(capsys, "verify", _url(server, "m.safetensors"), *(["--json"] if json_mode else []))
    if json_mode:
        assert json.loads(r.out)["path"] == shown
    else:
        assert r.out.startswith(f"{shown}: OK (safetensors")
    dst = tmp_path / "f.zt"
    r = run(capsys, "convert", _url(server, "m.safetensors"), dst, "--json")
    assert json.loads(r.out)["src"] == shown


def test_dataset_gc_names_an_fsspec_url_without_its_secrets(capsys: Any) -> None:
    url = f"memory://{USER}:{PASSWORD}@f08-bucket/ds{QUERY}"
    dataset.write(cols_a(4), url, batch_size=2)
    for extra in ((), ("--json",)):
        r = run(capsys, "dataset", "gc", "--dry-run", url, *extra)
        assert r.code == 0, r
        assert not _leaked(r.out + r.err), r
        assert "memory://f08-bucket/ds" in r.out
