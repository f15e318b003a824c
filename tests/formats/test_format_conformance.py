"""Every format entry of the registry passes tensorfile.testing.FormatConformance: the
tensor formats (safetensors, zTensor v1.0 and v2, GGUF) and the import/export entries (npz,
npy, PyTorch pickles). GGUF and PyTorch pickles are read-only: their fixtures come from the
gguf package and torch.save."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tensorfile.testing import FormatConformance
from tests.helpers.checkpoints import write_gguf

NDArray = np.ndarray[Any, Any]
Meta = Mapping[str, str]
ALL = ("F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL")
NUMPY = tuple(d for d in ALL if d != "BF16")


class TestSafetensors(FormatConformance):
    format_name, suffix = "safetensors", ".safetensors"
    dtypes = (*ALL, "F8_E4M3", "F8_E5M2")
    metadata: ClassVar[Meta] = {"license": "MIT", "note": "ü"}


class TestZTensorV1(FormatConformance):
    format_name, suffix = "ztensor", ".zt"
    dtypes = ALL
    metadata: ClassVar[Meta] = {"license": "MIT"}


class TestZTensorV2(FormatConformance):
    format_name, suffix = "ztensor", ".zt"
    dtypes = ALL
    metadata: ClassVar[Meta] = {"license": "MIT"}
    write_options: ClassVar[Mapping[str, Any]] = {"version": 2, "checksum": "xxh3"}


class TestZTensorV2Compressed(TestZTensorV2):
    write_options: ClassVar[Mapping[str, Any]] = {
        "version": 2,
        "compression": "zstd",
        "checksum": "sha256",
    }


class TestNpz(FormatConformance):
    format_name, suffix = "npz", ".npz"
    dtypes = NUMPY


class TestNpy(FormatConformance):
    format_name, suffix = "npy", ".npy"
    dtypes = ("F32",)
    single_tensor = True


class TestGGUF(FormatConformance):
    format_name, suffix = "gguf", ".gguf"
    dtypes = ("F32", "F16", "I8", "I16", "I32")
    metadata: ClassVar[Meta] = {"general.name": "tiny"}

    def write(
        self, path: Path, tensors: Mapping[str, NDArray], metadata: Mapping[str, str]
    ) -> None:
        write_gguf(path, dict(tensors), [("add_string", k, v) for k, v in metadata.items()])


class TestPyTorch(FormatConformance):
    format_name, suffix = "pytorch", ".pt"
    dtypes = ("F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL")
    cuts = 12
    flips = 16

    def write(
        self, path: Path, tensors: Mapping[str, NDArray], metadata: Mapping[str, str]
    ) -> None:
        import torch

        torch.save(_torch(tensors), path)


class TestPyTorchLegacy(TestPyTorch):
    def write(
        self, path: Path, tensors: Mapping[str, NDArray], metadata: Mapping[str, str]
    ) -> None:
        import torch

        torch.save(_torch(tensors), path, _use_new_zipfile_serialization=False)

    def test_detected_by_content_whatever_the_name(self, tmp_path: Path) -> None:
        """An old pickle is recognised by its opcode only when its name says PyTorch."""
        import shutil

        from tensorfile.formats import detect
        from tensorfile.sources import LocalSource

        path, _ = self.fixture(tmp_path)
        for other in ("renamed.bin", "renamed.pth", "RENAMED.CKPT"):
            shutil.copyfile(path, tmp_path / other)
            with LocalSource(tmp_path / other) as src:
                assert detect(src) is self.format


def _torch(tensors: Mapping[str, NDArray]) -> dict[str, Any]:
    from tensorfile.core.dtypes import from_numpy as dtype_of
    from tensorfile.frameworks.torch import from_numpy

    return {k: from_numpy(v, dtype_of(v.dtype)) for k, v in tensors.items()}
