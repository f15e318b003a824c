"""``TensorInfo.data_offsets`` means what the file's header says through every door (issue
24, item 4: through ``tensorfile.open`` it was absolute for safetensors, relative through
``ops.load``): relative to the data region for safetensors and GGUF, absolute for zTensor;
``byte_range`` is absolute everywhere."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import gguf
import numpy as np
import safetensors.numpy as ref

import tensorfile
from tensorfile.ops import load


def test_safetensors_data_offsets_are_the_headers(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    ref.save_file({"a": np.zeros(3, np.float32), "b": np.ones(5, np.int8)}, str(path))
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    with tensorfile.open(str(path)) as r:
        for name in ("a", "b"):
            want = tuple(header[name]["data_offsets"])
            assert r.info(name).data_offsets == want
            assert load(str(path)).tensors[name].data_offsets == want
            assert r.info(name).byte_range.start == 8 + n + want[0]


def test_gguf_data_offsets_are_relative_to_the_data_region(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_tensor("a", np.arange(8, dtype=np.float32))
    w.add_tensor("b", np.arange(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    reader = gguf.GGUFReader(str(path))
    with tensorfile.open(str(path)) as r:
        for t in reader.tensors:
            got = r.info(t.name)
            assert got.byte_range.start == t.data_offset  # gguf's: absolute
            assert got.data_offsets[0] == got.byte_range.start - reader.data_offset
            assert load(str(path)).tensors[t.name].data_offsets == got.data_offsets
