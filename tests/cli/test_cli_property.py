"""The command line's contract, for any argument list: hypothesis builds argument lists from
commands, options (valid, bogus, hostile) and a small set of files (valid, truncated,
hostile, missing, FIFOs, folders, globs, checkpoints whose index points outside), and every
run must end with status 0, 1 or 2, no traceback, nothing raw on the terminal, exactly one
``tensorfile: error:`` line for status 2 and nothing else on stderr but warnings otherwise;
and no file outside the checkpoints' own folders ever changes."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tensorfile.cli.app import main
from tests.helpers.checkpoints import MODEL, write_gguf, write_safetensors, write_sharded, write_zt
from tests.helpers.cli import ERROR_PREFIX, strict_json
from tests.helpers.hostile import NASTY, lying_sparse, unsafe_chars, with_manifest


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The files the argument lists may name, and the victim no command may change."""
    root = tmp_path_factory.mktemp("corpus")
    victim = write_safetensors(root / "victim.safetensors", metadata={"owner": "victim"})
    good = write_safetensors(root / "good.safetensors", metadata={"format": "pt"})
    zt = write_zt(root / "good.zt", attributes={"format": "pt"}, compression="zstd")
    gg = write_gguf(root / "good.gguf", {"t": np.ones((4, 8), np.float32)},
                    [("add_string", "general.name", "tiny\x1b[31m")])  # fmt: skip
    truncated = root / "truncated.safetensors"
    truncated.write_bytes(good.read_bytes()[:-7])
    cut_zt = root / "cut.zt"
    cut_zt.write_bytes(zt.read_bytes()[: len(zt.read_bytes()) // 2])
    nasty = write_safetensors(
        root / "nasty.safetensors",
        {f"n.{i}.{t}": np.full(2, i, np.float32) for i, t in enumerate(NASTY)},
        {f"k{t}": f"v{t}" for t in NASTY},
    )
    lie = lying_sparse(root / "lie.zt", "coo", (1 << 20, 1 << 20))

    def layout(m: dict[str, Any]) -> None:
        m["tensors"]["lm_head.weight"]["format"] = "ext\x1b[2J"

    ext = with_manifest(zt, root / "ext.zt", layout)
    names = sorted(MODEL)
    ckpt = write_sharded(root / "ckpt", [{n: MODEL[n] for n in names[:3]},
                                         {n: MODEL[n] for n in names[3:]}])  # fmt: skip
    evil = write_sharded(root / "evil", [{n: MODEL[n] for n in names[:3]},
                                         {n: MODEL[n] for n in names[3:]}])  # fmt: skip
    doc = json.loads(evil.read_text())
    doc["weight_map"][names[-1]] = f"file://{victim}"
    evil.write_text(json.dumps(doc))
    undecodable = write_safetensors(root / os.fsdecode(b"bad\xff\x1b.safetensors"))
    fifo = root / "pipe.safetensors"
    os.mkfifo(fifo)
    (root / "folder").mkdir()
    paths = [
        good, zt, gg, truncated, cut_zt, nasty, lie, ext, ckpt, ckpt.parent, evil, evil.parent,
        fifo, root / "folder", root / "missing.safetensors", root / "*.zt", root / "none-*",
        undecodable, root / os.fsdecode(b"gone\xfe"), "", "-", "http://[", "/dev/zero",
    ]  # fmt: skip
    valid = [good, zt, gg, nasty, ext, ckpt, ckpt.parent, undecodable, root / "good.*"]
    return {
        "paths": [os.fspath(p) for p in paths],
        "valid": [os.fspath(p) for p in valid],
        "victim": victim,
    }


OPTIONS = [
    "--json", "--tree", "--verbose", "--content", "--data", "--fail-on-diff", "--clear",
    "--format", "md", "text", "xml", "--set", "--delete", "k=v", "=v", "format=np",
    os.fsdecode(b"k=\xff"), "--bogus", "-x", "--", "--help", "--version", "0", "-1",
    "99999999999999999999", "\x1b[31m", "\u202e", "",
]  # fmt: skip
COMMANDS = ["inspect", "id", "summary", "diff", "meta"]


FLAGS = {
    "inspect": ["--json", "--tree", "--verbose"],
    "id": ["--json", "--content"],
    "summary": ["--json"],
    "diff": ["--json", "--data", "--fail-on-diff", "--format=md", "--format=text"],
    "meta": [
        "--json",
        "--clear",
        "--set=k=v",
        "--set=format=np",
        "--delete=format",
        "--set=" + NASTY[0] + "=" + NASTY[5],
    ],
}


@st.composite
def _well_formed(draw: Any, path: Any) -> list[str]:
    """A command, its paths and some of its own options, and now and then one stray word."""
    command = draw(st.sampled_from(COMMANDS))
    argv = [command, draw(path)]
    if command == "diff":
        argv.append(draw(path))
    argv += draw(st.lists(st.sampled_from(FLAGS[command]), max_size=3, unique=True))
    if draw(st.integers(0, 4)) == 0:
        argv.insert(draw(st.integers(1, len(argv))), draw(st.sampled_from(OPTIONS)))
    return argv


def _option(flag: str, argv: list[str]) -> bool:
    """Whether ``flag`` is an option of ``argv``: after ``--`` it is a path."""
    return flag in (argv[: argv.index("--")] if "--" in argv else argv)


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_argument_list_keeps_the_contract(corpus: dict[str, Any], data: Any) -> None:
    paths = corpus["paths"]
    word = st.one_of(st.sampled_from(OPTIONS), st.sampled_from(paths))
    valid = st.sampled_from(corpus["valid"])
    some = st.one_of(valid, valid, st.sampled_from(paths))  # two in three valid
    argv = data.draw(st.one_of(_well_formed(some), st.lists(word, max_size=5)), label="argv")
    victim: Path = corpus["victim"]
    before = _digest(victim)
    code, out, err = _run(argv)
    event(f"exit {code}")
    assert code in (0, 1, 2), (argv, code, err)
    assert "Traceback" not in err and "internal error" not in err, (argv, err)
    assert unsafe_chars(out) == [] and unsafe_chars(err) == [], (argv, out, err)
    errors = [line for line in err.splitlines() if line.startswith(ERROR_PREFIX)]
    if code == 2 and len(errors) == 1:  # one path (or bad usage): one line, nothing else
        assert err.startswith(ERROR_PREFIX) and err.count("\n") == 1, (argv, err)
        assert out == "", (argv, out)
    elif code == 2:  # several paths: one line per file that failed, then which ones
        assert all(line.startswith(("tensorfile: error: ", "tensorfile: warning: "))
                   for line in err.splitlines()), (argv, err)  # fmt: skip
        assert errors[-1].split(": ")[2].endswith(("could not be read", "could not be edited"))
        if _option("--json", argv) and out:
            assert isinstance(strict_json(out), list), (argv, out)
    else:
        assert all(line.startswith("tensorfile: warning: ") for line in err.splitlines()), err
        json_mode = _option("--json", argv) and not _option("--help", argv)
        json_mode = json_mode and not _option("--version", argv)
        if json_mode and out:
            strict_json(out)
    assert _digest(victim) == before, argv
