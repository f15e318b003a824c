"""The error tree of ``tensorfile.errors`` (the public name of ``tensorfile.core.errors``)."""

from __future__ import annotations

import tensorfile.errors


def test_error_hierarchy() -> None:
    e = tensorfile.errors
    assert issubclass(e.SafetensorError, e.FormatError)
    assert issubclass(e.ZTensorError, e.FormatError)
    for cls in (e.FormatError, e.ChecksumError, e.UnsupportedError, e.SourceError):
        assert issubclass(cls, e.TensorFileError)
    assert issubclass(e.TensorNotFoundError, KeyError)
    for name in e.__all__:
        cls = getattr(e, name)
        if issubclass(cls, Warning):
            continue
        assert issubclass(cls, e.TensorFileError), name
        if name.endswith("Error") and name not in ("TensorFileError",):
            assert cls.__doc__, name
    err = e.InvalidOffsetsError("x", offset=12, tensor="w")
    assert (err.format, err.offset, err.tensor) == ("safetensors", 12, "w")
