"""tensorfile demo: write a model, inspect it, read it back zero-copy, print what happened.

Run with ``make demo`` (or ``python examples/demo.py OUTPUT_DIR``). Only numpy is needed.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import tensorfile
from tensorfile import ztensor
from tensorfile.safetensors import StreamWriter, safe_open
from tensorfile.safetensors.numpy import load_file, save_file


def _model(rng: np.random.Generator) -> dict[str, np.ndarray]:
    layers: dict[str, np.ndarray] = {
        "embed.weight": rng.standard_normal((4096, 256), dtype=np.float32),
    }
    for i in range(4):
        layers[f"layers.{i}.attn.weight"] = rng.standard_normal((256, 256), dtype=np.float32)
        layers[f"layers.{i}.attn.bias"] = np.zeros(256, np.float16)
        layers[f"layers.{i}.mlp.weight"] = rng.standard_normal((256, 1024), dtype=np.float32)
    layers["step"] = np.array(1000, np.int64)
    return layers


def _ztensor_demo(out_dir: str, tensors: dict[str, np.ndarray]) -> None:
    """The same model as zTensor: compressed and checksummed, plus a sparse tensor."""
    zt_path = os.path.join(out_dir, "model.zt")
    sparse = ztensor.CSRTensor.from_dense(np.eye(512, dtype=np.float32))
    ztensor.save_file(
        {**tensors, "adjacency": sparse},
        zt_path,
        attributes={"license": "MIT", "framework": "numpy"},
        compression="zstd",
        checksum="crc32c",
    )
    with tensorfile.open(zt_path) as z:
        info = z.info("embed.weight")
        size = os.path.getsize(zt_path)
        print()
        print(f"zTensor {z.catalog.version} file {zt_path}: {len(z)} tensors, {size:,} bytes "
              f"(zstd), attributes {dict(z.metadata)}")  # fmt: skip
        print(f"embed.weight: {info.data.encoding}, {info.data.range.length:,} stored bytes, "
              f"digest {info.data.digest}")  # fmt: skip
        back = z.get_tensor("embed.weight")
        csr = z.get_tensor("adjacency")
        same = np.array_equal(back, tensors["embed.weight"])
        print(f"decompressed and verified: equal={same}; sparse_csr adjacency: nnz={csr.nnz}, "
              f"trace={csr.to_dense().trace()}")  # fmt: skip


def main(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "model.safetensors")
    tensors = _model(np.random.default_rng(0))

    t0 = time.perf_counter()
    save_file(tensors, path, metadata={"format": "np", "demo": "tensorfile"}, align=64)
    print(f"wrote {path}: {len(tensors)} tensors, {os.path.getsize(path):,} bytes "
          f"in {time.perf_counter() - t0:.3f} s (atomic, data aligned to 64 bytes)")  # fmt: skip

    with tensorfile.open(path) as reader:
        print(f"\n{reader.format} file, header {reader.catalog.header_size} bytes, "
              f"metadata {dict(reader.metadata)}")  # fmt: skip
        print(f"{'tensor':<24} {'dtype':<6} {'shape':<14} {'bytes':>10}  file offsets")
        for name in reader.keys():
            info = reader.info(name)
            rng = info.byte_range  # absolute offsets in the file, as `tensorfile inspect` shows
            print(f"{name:<24} {info.dtype.name:<6} {list(info.shape)!s:<14} {rng.length:>10,}  "
                  f"[{rng.start}, {rng.stop})")  # fmt: skip
        start = reader.catalog.data_start
        first = reader.info("embed.weight").byte_range
        print(f"(file offsets count from the file's first byte; the header's own data_offsets "
              f"count from the data section at byte {start:,}: embed.weight's are "
              f"[{first.start - start}, {first.stop - start}])")  # fmt: skip
        read_for_header = reader.source.stats.bytes_read
        emb = reader.view("embed.weight")
        print(f"\nzero-copy view of embed.weight: shape {emb.shape}, "
              f"writeable={emb.flags.writeable}, bytes read so far: {read_for_header:,} "
              "(header only)")  # fmt: skip
        row = reader.read_slice("embed.weight", 123)
        extra = reader.source.stats.bytes_read - read_for_header
        same_row = np.array_equal(row, tensors["embed.weight"][123])
        print(f"read_slice('embed.weight', 123) read {extra:,} bytes; "
              f"equal to the saved row: {same_row}")  # fmt: skip

    loaded = load_file(path)
    same = all(np.array_equal(loaded[k], v) for k, v in tensors.items())
    print(f"\nload_file: {len(loaded)} owned arrays, all equal to what was written: {same}")

    with safe_open(path, framework="np") as f:
        part = f.get_slice("layers.0.mlp.weight")[:2, ::256]
        print(f"safe_open(...).get_slice('layers.0.mlp.weight')[:2, ::256] -> shape {part.shape}")

    stream_path = os.path.join(out_dir, "streamed.safetensors")
    specs = {"big": ("F32", (1024, 256))}
    with StreamWriter(stream_path, specs) as w:
        for start in range(0, 1024, 256):  # one chunk of rows at a time
            w.write("big", np.full((256, 256), start, np.float32))
    print(f"StreamWriter wrote {stream_path} in 4 chunks: "
          f"{tensorfile.open(stream_path).get_tensor('big')[::256, 0].tolist()}")  # fmt: skip

    _ztensor_demo(out_dir, tensors)

    bad = os.path.join(out_dir, "broken.safetensors")
    with open(path, "rb") as src, open(bad, "wb") as dst:
        dst.write(src.read()[:-10])  # truncated download
    try:
        tensorfile.open(bad)
    except tensorfile.SafetensorError as exc:
        print(f"\na truncated file is refused: {type(exc).__name__}: {exc}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "demo-output")
