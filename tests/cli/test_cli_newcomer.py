"""What a newcomer meets in the first hour: names in natural order, nouns counted right,
float32 values as written (``1e-05``), no empty tables, long values cut with their length,
a ``schema`` in every ``--json`` document, and ``--help`` with examples, exit statuses and
URLs."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensorfile.cli._text import natural_key, plural, short_float
from tests.helpers.checkpoints import MODEL, write_gguf, write_safetensors, write_sharded, write_zt
from tests.helpers.cli import natural, run, run_json, table_rows

CLI = Path(__file__).resolve().parents[2] / "src" / "tensorfile" / "cli"

# -- natural order -------------------------------------------------------------------------------

LAYERS = [f"layers.{i}.w" for i in (0, 1, 2, 9, 10, 11, 100)]


def test_natural_key() -> None:
    names = ["b.10", "b.9", "a", "b.09", "b.1.x", "b.1", "x" + "9" * 5000, "x" + "1" + "0" * 5000]
    assert sorted(names, key=natural_key) == natural(names[:-2]) + names[-2:]
    assert sorted(["v1.10", "v1.2", "v1.02"], key=natural_key) == ["v1.02", "v1.2", "v1.10"]


def test_tensors_sort_naturally_everywhere(tmp_path: Path, capsys: Any) -> None:
    tensors = {n: np.full(2, i, np.float32) for i, n in enumerate(reversed(LAYERS))}
    a = write_safetensors(tmp_path / "a.safetensors", tensors)
    r = run(capsys, "inspect", a)
    assert [row[0] for row in table_rows(r.out, 5)] == LAYERS
    assert [t["name"] for t in run_json(capsys, "inspect", a)["tensors"]] == LAYERS
    tree = run(capsys, "inspect", a, "--tree").out
    shown = [line.split("──")[1].split()[0] for line in tree.splitlines() if "──" in line]
    assert [s for s in shown if s != "w"] == ["layers", *(n.split(".")[1] for n in LAYERS)]
    b = write_safetensors(tmp_path / "b.safetensors", {"other": np.ones(1, np.float32)})
    assert run_json(capsys, "diff", b, a)["tensors"]["added"] == LAYERS
    assert run_json(capsys, "diff", a, b)["tensors"]["removed"] == LAYERS
    lines = run(capsys, "diff", b, a).out.splitlines()
    assert [line[4:] for line in lines if line.startswith("  + ")] == LAYERS
    changed = {n: t if n == LAYERS[0] else t + 1 for n, t in tensors.items()}
    c = write_safetensors(tmp_path / "c.safetensors", changed)
    doc = run_json(capsys, "diff", a, c, "--data")
    assert [d["name"] for d in doc["data"]["differing"]] == LAYERS[1:]


# -- counted nouns -------------------------------------------------------------------------------


def test_plural() -> None:
    assert [plural(n, "tensor") for n in (0, 1, 2, 1234)] == [
        "0 tensors", "1 tensor", "2 tensors", "1,234 tensors",
    ]  # fmt: skip
    assert plural(1, "entry", "entries") == "1 entry"
    assert plural(3, "entry", "entries") == "3 entries"


def test_one_of_everything_is_singular(tmp_path: Path, capsys: Any) -> None:
    one = write_sharded(tmp_path / "ckpt", [{"w": np.ones(1, np.int8)}])
    r = run(capsys, "inspect", one)
    lines = r.out.splitlines()
    assert " · 1 tensor · 1 parameter · 1 B of tensor data" in lines[1]
    i = lines.index("1 shard:")
    assert lines[i + 1] == "  model-00001-of-00001.safetensors  1 tensor, 1 B"
    tree = run(capsys, "inspect", one, "--tree").out
    assert "model.safetensors.index.json  1 parameter" in tree
    a = write_safetensors(tmp_path / "a.safetensors", {"w": np.array([1, 2], np.int8)})
    b = write_safetensors(tmp_path / "b.safetensors", {"w": np.array([1, 3], np.int8)})
    lines = run(capsys, "diff", a, b, "--data").out.splitlines()
    assert "data: 1 of 1 compared tensor differs" in lines
    assert "  ~ w: 1 element differs, max |a - b| = 1" in lines
    r = run(capsys, "meta", a, "--set", "k=v")
    assert r.out.splitlines()[0].startswith("updated 1 file atomically")


def test_no_hard_coded_plural_in_the_command_line() -> None:
    """Every counted noun goes through ``plural``: no ``file(s)``, no ``{n} tensors``."""
    counted = re.compile(
        r"\{[^{}]*\}\s+(?:more\s+)?(tensors|files|shards|bytes|parameters|elements|items|"
        r"characters|keys|entries|values)\b"
    )
    found = []
    for path in sorted(CLI.glob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"(?<!http)\(s\)", line) or counted.search(line):
                found.append(f"{path.name}:{n}: {line.strip()}")
    assert found == []


# -- floats at their own precision ---------------------------------------------------------------


def _gguf_floats(path: Path, eps: float = 1e-5) -> Path:
    return write_gguf(
        path,
        {"t": np.ones(4, np.float32)},
        [
            ("add_float32", "llama.attention.layer_norm_rms_epsilon", eps),
            ("add_float64", "x.f64", 0.1),
            ("add_array", "x.scores", [0.1, 0.2, -3.3]),
        ],
    )


def test_short_float() -> None:
    assert short_float(float(np.float32(1e-5)), bits=32) == "1e-05"
    assert short_float(float(np.float32(0.1)), bits=32) == "0.1"
    assert short_float(float(np.float32(0.1))) == "0.10000000149011612"  # a float64 is itself
    assert short_float(float("inf"), bits=32) == "inf"


def test_float32_metadata_prints_as_written(tmp_path: Path, capsys: Any) -> None:
    path = _gguf_floats(tmp_path / "m.gguf")
    out = run(capsys, "inspect", path).out
    assert "  llama.attention.layer_norm_rms_epsilon: 1e-05" in out.splitlines()
    assert "  x.scores: [0.1, 0.2, -3.3]" in out.splitlines()
    assert "  x.f64: 0.1" in out.splitlines()
    assert "9.99999" not in out and "0.10000000149" not in out
    meta = run(capsys, "meta", path).out.splitlines()
    assert "llama.attention.layer_norm_rms_epsilon: 1e-05" in meta
    for cmd in ("inspect", "meta"):
        r = run(capsys, cmd, path, "--json")
        assert '"llama.attention.layer_norm_rms_epsilon": 1e-05' in r.out  # a number, short
        assert '"x.scores": [0.1, 0.2, -3.3]' in r.out
        assert json.loads(r.out)["metadata"]["llama.attention.layer_norm_rms_epsilon"] == 1e-05


def test_diff_shows_float32_values_and_statistics_as_written(tmp_path: Path, capsys: Any) -> None:
    a = _gguf_floats(tmp_path / "a.gguf")
    b = _gguf_floats(tmp_path / "b.gguf", eps=1e-6)
    lines = run(capsys, "diff", a, b).out.splitlines()
    assert "  ~ llama.attention.layer_norm_rms_epsilon: 1e-05 -> 1e-06" in lines
    doc = run_json(capsys, "diff", a, b)
    assert doc["metadata"]["changed"] == {"llama.attention.layer_norm_rms_epsilon": [1e-05, 1e-06]}
    x = write_safetensors(tmp_path / "x.safetensors", {"w": np.zeros(3, np.float32)})
    y = write_safetensors(tmp_path / "y.safetensors", {"w": np.array([0, 1e-5, 0], np.float32)})
    lines = run(capsys, "diff", x, y, "--data").out.splitlines()
    assert "  ~ w: 1 element differs, max |a - b| = 1e-05" in lines
    r = run(capsys, "diff", x, y, "--data", "--json")
    assert '"max_abs_diff": 1e-05' in r.out
    f64 = {"w": np.array([0.1], np.float64)}
    x = write_safetensors(tmp_path / "x64.safetensors", f64)
    y = write_safetensors(tmp_path / "y64.safetensors", {"w": np.zeros(1, np.float64)})
    assert "max |a - b| = 0.1" in run(capsys, "diff", x, y, "--data").out


# -- no empty tables -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gguf", "safetensors", "ztensor"])
def test_a_file_without_tensors_prints_no_empty_table(
    tmp_path: Path, capsys: Any, kind: str
) -> None:
    if kind == "gguf":
        path = write_gguf(tmp_path / "m.gguf", {}, [("add_string", "general.name", "tiny")])
    elif kind == "ztensor":
        path = write_zt(tmp_path / "m.zt", {})
    else:
        path = write_safetensors(tmp_path / "m.safetensors", {})
    r = run(capsys, "inspect", path)
    assert r.code == 0, r
    assert not set("┃━│╇") & set(r.out), r.out  # no table, no header over zero rows
    assert " · 0 tensors · 0 parameters · 0 B of tensor data" in r.out.splitlines()[1]
    if kind != "gguf":
        assert "no metadata" in r.out.splitlines()


def test_a_file_without_metadata_says_so(tmp_path: Path, capsys: Any) -> None:
    path = write_safetensors(tmp_path / "m.safetensors", {"w": np.ones(2, np.float32)})
    lines = run(capsys, "inspect", path).out.splitlines()
    assert "no metadata" in lines and not any(line.startswith("metadata") for line in lines)
    start = 8 + int.from_bytes(path.read_bytes()[:8], "little")  # absolute file offsets
    assert table_rows("\n".join(lines), 5) == [["w", "F32", "[2]", "8", f"[{start}, {start + 8})"]]


# -- long values ---------------------------------------------------------------------------------


def test_meta_set_echoes_long_values_cut_with_their_length(tmp_path: Path, capsys: Any) -> None:
    path = write_safetensors(tmp_path / "m.safetensors", {"w": np.ones(1, np.float32)})
    big = "x" * 51_200
    r = run(capsys, "meta", path, "--set", f"big={big}", "--set", "small=v")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[1] == "big: " + "x" * 117 + "... (51,200 characters)"
    assert lines[2] == "small: v"
    assert len(r.out) < 400
    assert run_json(capsys, "meta", path)["metadata"]["big"] == big  # stored whole
    assert run(capsys, "meta", path).out.splitlines()[0] == f"big: {big}"  # printed whole


def _vocab(path: Path, tokens: list[str]) -> Path:
    return write_gguf(path, {"t": np.ones(4, np.float32)}, [("add_array", "tok.tokens", tokens)])


def test_diff_cuts_long_values_as_inspect_does(tmp_path: Path, capsys: Any) -> None:
    tokens = [f"token{i}" for i in range(60_000)]
    a = _vocab(tmp_path / "a.gguf", tokens)
    b = _vocab(tmp_path / "b.gguf", [*tokens[:-1], "changed"])
    r = run(capsys, "diff", a, b)
    (line,) = [line for line in r.out.splitlines() if line.startswith("  ~ tok.tokens")]
    assert len(line) < 400 and line.count("... (60,000 items)") == 2
    shown = run(capsys, "inspect", a).out
    (inspected,) = [x for x in shown.splitlines() if x.startswith("  tok.tokens: ")]
    assert inspected[len("  tok.tokens: ") :] == line.split(": ", 1)[1].split(" -> ")[0]
    r = run(capsys, "diff", a, b, "--verbose")
    (line,) = [line for line in r.out.splitlines() if line.startswith("  ~ tok.tokens")]
    assert "'token59998', 'token59999']" in line and "'token59998', 'changed']" in line
    doc = run_json(capsys, "diff", a, b)
    assert doc["metadata"]["changed"]["tok.tokens"][1][-1] == "changed"  # JSON: whole


# -- schema in every --json document -------------------------------------------------------------


def test_every_json_document_has_the_schema(tmp_path: Path, capsys: Any) -> None:
    a = write_safetensors(tmp_path / "a.safetensors", MODEL, {"k": "v"})
    b = write_zt(tmp_path / "b.zt", MODEL)
    for argv in (
        ("inspect", a), ("id", a), ("id", a, "--content"), ("summary", a), ("meta", a),
        ("diff", a, b), ("diff", a, b, "--data"), ("meta", a, "--set", "x=1"),
    ):  # fmt: skip
        doc = run_json(capsys, *argv)
        assert doc["schema"] == 1, argv
    assert run_json(capsys, "diff", a, b)["schema"] == run_json(capsys, "inspect", a)["schema"]


# -- --help --------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["inspect", "id", "summary", "diff", "meta"])
def test_help_has_an_example_exit_statuses_and_urls(capsys: Any, command: str) -> None:
    r = run(capsys, command, "--help")
    assert r.code == 0 and r.err == ""
    for word in ("Example", "Exit status", "URL", f"tensorfile {command} "):
        assert word in r.out, (command, word)
    assert "  2  " in r.out  # the statuses are listed, one a line
    if command == "diff":
        assert "--verbose" in r.out and "  1  " in r.out
    else:
        assert "Several paths" in r.out


@pytest.mark.parametrize("command", ["inspect", "meta", "summary", "id", "verify"])
def test_help_lists_every_format_the_registry_reads(capsys: Any, command: str) -> None:
    from tensorfile.formats import FORMATS

    r = run(capsys, command, "--help")
    text = " ".join(r.out.split())  # argparse wraps the path help over lines
    for fmt in FORMATS.values():
        assert fmt.title in text, (command, fmt.title)


def test_top_level_help_says_which_commands_read_data(capsys: Any) -> None:
    r = run(capsys, "--help")
    text = " ".join(r.out.split())
    headers_only, _, rest = text.partition(" read headers only")
    assert rest, text
    for command in ("convert", "verify"):  # they read every tensor: not headers only
        assert command not in headers_only.rsplit(".", 1)[-1], headers_only
        assert command in rest.split(" read tensor data")[0], rest
    assert "reading headers only" not in text


# -- progress on a terminal ----------------------------------------------------------------------

_IN_A_TTY = """
import sys
import tensorfile.cli._progress as progress
progress.MIN_BYTES = 0  # a bar for any size, for the test
from tensorfile.cli.app import main
sys.exit(main(sys.argv[1:]))
"""


def _with_tty_stderr(*argv: Any) -> tuple[int, str, str]:
    """Run the command line with stderr on a pseudo-terminal; its status, stdout and what
    the terminal received."""
    master, slave = os.openpty()
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "100"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", _IN_A_TTY, *map(str, argv)],
        stdout=subprocess.PIPE,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the other end closed (Linux: EIO)
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    out = proc.stdout.read().decode() if proc.stdout else ""
    return proc.wait(60), out, seen.decode("utf-8", "replace")


def test_diff_data_and_content_id_show_progress_on_a_terminal(tmp_path: Path) -> None:
    a = write_safetensors(tmp_path / "a.safetensors", {"w": np.zeros(1 << 16, np.float32)})
    b = write_safetensors(tmp_path / "b.safetensors", {"w": np.ones(1 << 16, np.float32)})
    code, out, tty = _with_tty_stderr("diff", a, b, "--data")
    assert code == 0 and "the files differ" in out
    assert "comparing" in tty and "━" in tty, tty
    code, out, tty = _with_tty_stderr("id", a, "--content")
    assert code == 0 and len(out.strip()) == 64
    assert "hashing" in tty, tty
    code, out, tty = _with_tty_stderr("diff", a, b, "--json")  # no data: nothing to show
    assert code == 0 and json.loads(out)["identical"] is True and tty == ""
