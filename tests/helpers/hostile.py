"""Files and text that lie: what the hostile-input tests of tests/ops and tests/cli share.

* :data:`NASTY`: strings a terminal would act on (escape sequences, carriage return, bell,
  bidirectional overrides, C1 controls, line separators) and :func:`unsafe_chars`, which
  finds any of them in a program's output.
* :func:`with_manifest`: a zTensor file whose manifest was edited (declared shapes that lie).
* :func:`lying_sparse`: a small CSR or COO zTensor file that declares a huge shape.
* :func:`st_raw`: a safetensors file from a raw header.
* :func:`vmhwm_of`: the peak resident memory of a snippet run in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cbor2
import numpy as np

from tensorfile import ztensor

NASTY = [
    "\x1b[31mred\x1b[0m",  # SGR colour
    "\x1b]0;pwned\x07",  # OSC: set the window title, ended by BEL
    "\x1b[2J\x1b[H",  # clear the screen
    "line\rover",  # carriage return: overwrite what was printed
    "bell\x07",
    "\u202egnp.exe",  # right-to-left override
    "\u2066iso\u2069",  # bidi isolates
    "c1\x9b31m",  # C1 CSI
    "sep\u2028arated",  # line separator
    "zero\u200bwidth",
    "nul\x00byte",
    "del\x7f",
    "tab\tnew\nline",
]
"""Hostile pieces of text: each holds at least one character that must never reach a
terminal raw."""

_UNSAFE_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp", "Cn"}


def unsafe_chars(text: str) -> list[str]:
    """The characters of ``text`` a terminal could act on (everything of categories Cc, Cf,
    Cs, Zl, Zp, Cn but the newline that ends each line)."""
    return [c for c in text if c != "\n" and unicodedata.category(c) in _UNSAFE_CATEGORIES]


def with_manifest(src: Path, dst: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """``src`` (a zTensor file) with its CBOR manifest changed by ``change``, as ``dst``."""
    raw = src.read_bytes()
    (n,) = struct.unpack("<Q", raw[-8:])
    start = len(raw) - 8 - n
    manifest = cbor2.loads(raw[start:-8])
    change(manifest)
    encoded = cbor2.dumps(manifest)
    dst.write_bytes(raw[:start] + encoded + struct.pack("<Q", len(encoded)))
    return dst


def lying_sparse(path: Path, layout: str, shape: tuple[int, ...], name: str = "s") -> Path:
    """A zTensor file of one float32 sparse tensor (``"csr"`` or ``"coo"``) holding 1.5 at
    its first cell, written by tensorfile, whose manifest then declares ``shape``: a few
    hundred bytes that claim ``prod(shape) * 4`` bytes of dense data. (CSR stores one row
    pointer per row, so only its column count can lie cheaply: keep ``shape[0]`` small.)"""
    one = np.array([1.5], np.float32)
    value: Any
    if layout == "csr":
        rows = shape[0]
        indptr = np.array([0] + [1] * rows, np.uint64)
        value = ztensor.CSRTensor(one, np.array([0]), indptr, (rows, 1))
    else:
        value = ztensor.COOTensor(one, np.zeros((len(shape), 1), np.uint64), (1,) * len(shape))
    tmp = path.with_name(path.name + ".tmp")
    ztensor.save_file({name: value}, tmp)

    def claim(m: dict[str, Any]) -> None:
        m["tensors"][name]["shape"] = list(shape)

    with_manifest(tmp, path, claim)
    tmp.unlink()
    return path


def st_raw(header: dict[str, Any], data: bytes) -> bytes:
    """A safetensors file's bytes from a header (dumped as JSON) and the data buffer."""
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def vmhwm_of(code: str, timeout: float = 120) -> tuple[int, str]:
    """Run ``code`` in a fresh interpreter; returns its peak resident memory in bytes (the
    kernel's ``VmHWM``) and what it printed. ``code`` must not print ``VMHWM``."""
    probe = (
        "\nwith open('/proc/self/status') as _f:\n"
        "    print('VMHWM', [l.split()[1] for l in _f if l.startswith('VmHWM')][0])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code + probe],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    kib = int(lines[-1].split()[1])
    return kib * 1024, "\n".join(lines[:-1])
