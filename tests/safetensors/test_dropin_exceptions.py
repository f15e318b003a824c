"""Every error path of the drop-in API raises what code written against the reference
catches: the same builtin types (``FileNotFoundError``, ``OSError``, ``TypeError``,
``KeyError``, ``RuntimeError``, ``ValueError``) and a ``SafetensorError`` where the
reference raises one, while staying tensorfile's own classes. The real ``safetensors`` is
the oracle: each case runs against both."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import safetensors as ref
import safetensors.numpy as ref_np
import safetensors.torch as ref_pt
import torch

import tensorfile.safetensors as ours
import tensorfile.safetensors.numpy as ours_np
import tensorfile.safetensors.torch as ours_pt
from tensorfile.errors import SafetensorError, TensorFileError

BUILTINS = (FileNotFoundError, OSError, TypeError, KeyError, RuntimeError, ValueError)

Face = tuple[Any, Any, Any]  # (package, numpy module, torch module)
REF: Face = (ref, ref_np, ref_pt)
OURS: Face = (ours, ours_np, ours_pt)


def _cases(folder: str, good: str) -> dict[str, Callable[[Face], object]]:
    missing = os.path.join(folder, "missing.safetensors")
    nowhere = os.path.join(folder, "no", "such", "x.safetensors")
    bad_spec = {"t": {"dtype": "float32", "shape": [1], "data_ptr": 0, "data_len": 0}}
    return {
        "save_file into a missing folder": lambda m: m[1].save_file({"a": np.ones(2)}, nowhere),
        "save_file onto a folder": lambda m: m[1].save_file({"a": np.ones(2)}, folder),
        "serialize_file into a missing folder": lambda m: m[0].serialize_file({}, nowhere),
        "metadata value not a string": lambda m: m[1].save({"a": np.ones(2)}, {"k": 1}),
        "metadata key not a string": lambda m: m[1].save({"a": np.ones(2)}, {1: "v"}),
        "metadata not a dict": lambda m: m[1].save({"a": np.ones(2)}, [("k", "v")]),
        "tensor name not a string (np)": lambda m: m[1].save({1: np.ones(2)}),
        "tensor name not a string (pt)": lambda m: m[2].save({1: torch.ones(2)}),
        "metadata value not a string (pt)": lambda m: m[2].save({"a": torch.ones(2)}, {"k": 1}),
        "object dtype": lambda m: m[1].save({"a": np.array([object()])}),
        "pt value not a tensor": lambda m: m[2].save_file({"a": np.ones(2)}, nowhere),
        "load of garbage": lambda m: m[1].load(b"garbage!"),
        "load of a str": lambda m: m[1].load("str"),
        "deserialize garbage": lambda m: m[0].deserialize(b"xx"),
        "deserialize a str": lambda m: m[0].deserialize("xx"),
        "serialize raw dicts": lambda m: m[0].serialize(bad_spec),
        "load_file of a missing file": lambda m: m[1].load_file(missing),
        "load_file of a folder": lambda m: m[1].load_file(folder),
        "load_file of an int": lambda m: m[1].load_file(3),
        "pt load_file of a missing file": lambda m: m[2].load_file(missing),
        "pt load_file on a bad device": lambda m: m[2].load_file(good, device="nonsense"),
        "pt load_model of a missing file": lambda m: m[2].load_model(
            torch.nn.Linear(1, 1), missing
        ),
        "safe_open with a bad framework": lambda m: m[0].safe_open(good, framework="nope"),
        "safe_open of an int": lambda m: m[0].safe_open(3, framework="np"),
        "safe_open of None": lambda m: m[0].safe_open(None, framework="np"),
        "get_tensor of a missing name": lambda m: m[0].safe_open(good, "np").get_tensor("zz"),
        "get_slice of a missing name": lambda m: m[0].safe_open(good, "np").get_slice("zz"),
        "get_tensor of an int": lambda m: m[0].safe_open(good, "np").get_tensor(3),
        "keys after close": lambda m: _closed(m[0].safe_open(good, "np")).keys(),
        "TensorSpec of an unknown dtype": lambda m: m[0].TensorSpec(
            dtype="nonsense", shape=[1], data_ptr=0, data_len=0
        ),
    }


def _closed(f: Any) -> Any:
    f.__exit__(None, None, None)
    return f


def _outcome(face: Face, case: Callable[[Face], object]) -> BaseException | None:
    try:
        case(face)
    except Exception as exc:
        return exc
    return None


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    folder = str(tmp_path_factory.mktemp("dropin-errors"))
    good = os.path.join(folder, "good.safetensors")
    ref_np.save_file({"a": np.ones(3, np.float32)}, good)
    return folder, good


CASES = list(_cases("", ""))


@pytest.mark.parametrize("name", CASES)
def test_error_paths_raise_what_the_reference_raises(files: tuple[str, str], name: str) -> None:
    case = _cases(*files)[name]
    theirs, mine = _outcome(REF, case), _outcome(OURS, case)
    assert theirs is not None, f"the reference accepts {name}"
    assert isinstance(mine, TensorFileError), f"{name}: {mine!r}"
    for kind in BUILTINS:
        if isinstance(theirs, kind):
            assert isinstance(mine, kind), f"{name}: reference {theirs!r}, ours {mine!r}"
    if isinstance(theirs, ref.SafetensorError):
        assert isinstance(mine, SafetensorError), f"{name}: reference {theirs!r}, ours {mine!r}"


def test_where_the_reference_crashes_tensorfile_says_what_is_wrong() -> None:
    # the reference fails with an AttributeError from deep inside on these
    for bad in ([np.ones(2)], {"a": [1, 2]}):
        with pytest.raises(AttributeError):
            ref_np.save(bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="expected"):
            ours_np.save(bad)  # type: ignore[arg-type]


def test_a_url_is_read_not_taken_for_a_missing_path() -> None:
    # the reference says "No such file or directory" for a URL; tensorfile reads it (here
    # nothing listens on the port, so the error is the connection's)
    url = "http://127.0.0.1:9/x.safetensors"
    with pytest.raises(FileNotFoundError):
        ref.safe_open(url, framework="np")
    with pytest.raises(OSError, match=r"127\.0\.0\.1") as info:
        ours.safe_open(url, framework="np")
    assert not isinstance(info.value, FileNotFoundError)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.helpers.servers import start_range_server

    root = tmp_path_factory.mktemp("served")
    server, stopper = start_range_server(root, root / "access.log")
    yield server
    stopper.terminate()


def test_safe_open_and_load_file_read_urls(served: Any) -> None:
    tensors = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(2, np.int8)}
    ours_np.save_file(tensors, str(served.root / "m.safetensors"), {"k": "v"})
    url = f"{served.url}/m.safetensors"
    with ours.safe_open(url, framework="np") as f:
        assert f.keys() == ["b", "w"] and f.metadata() == {"k": "v"}
        assert f.get_slice("w")[1:, 2].tolist() == [6.0, 10.0]
    for key, value in ours_np.load_file(url).items():
        np.testing.assert_array_equal(value, tensors[key])
    for key, value in ours_pt.load_file(url).items():
        np.testing.assert_array_equal(value.numpy(), tensors[key])
    with pytest.raises(FileNotFoundError, match="404"):
        ours.safe_open(f"{served.url}/absent.safetensors", framework="np")
