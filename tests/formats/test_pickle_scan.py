"""Every PyTorch pickle (zip ``data.pkl`` and old format) is scanned before ``torch.load``
runs it, and what torch loaded is checked before it is copied: no size a file only claims
becomes an allocation (review35g g01, g02, g03, g04, g07), while ordinary checkpoints
(state dicts, optimizer states, parameters, every dtype, plain values) read as before."""

from __future__ import annotations

import _codecs
import collections
import io
import pickle
import re
import struct
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import tensorfile
from tensorfile.errors import FormatError, UnsupportedError
from tests.formats.limits import GIB, OPEN_SAYS, run_limited

_MAGIC = 0x1950A86A20F9469CFC6C


def _save(obj: object, path: Path, zipped: bool) -> Path:
    torch.save(obj, path, _use_new_zipfile_serialization=zipped)
    return path


class _Call:
    """Pickled as ``func(*args)``: what a hostile ``torch.save`` can write."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.func, self.args


@pytest.mark.parametrize("zipped", [False, True])
def test_a_bytearray_of_a_claimed_size_is_refused_before_torch_allocates(
    tmp_path: Path, zipped: bool
) -> None:
    """g01: ``set(bytearray(N))`` (``{0}``: nothing of it kept) in a pickle of a few hundred
    bytes made ``torch.load(weights_only=True)`` allocate N; refused, naming the call."""
    obj = {"w": torch.ones(4), "note": _Call(set, _Call(bytearray, 64 << 20))}
    path = _save(obj, tmp_path / "m.pt", zipped)
    with pytest.raises(UnsupportedError, match=r"calls builtins\.bytearray \(with \(67108864\)\)"):
        tensorfile.open(str(path))


def test_calls_that_allocate_or_convert_are_refused(tmp_path: Path) -> None:
    """g03 (torch's side): an allowed rebuild that converts a stride-0 view while loading,
    and a legacy tensor class called with a size, never reach torch (a stride-0 view itself
    is refused before them: see the test below)."""
    view = torch.zeros(4, dtype=torch.uint8)
    convert = _Call(
        torch._utils._rebuild_device_tensor_from_cpu_tensor, view, torch.float64, "cpu", False
    )
    path = _save({"w": convert}, tmp_path / "c.pt", True)
    with pytest.raises(UnsupportedError, match="converts a tensor while loading"):
        tensorfile.open(str(path))
    calls = {
        "torch.FloatTensor": _Call(torch.FloatTensor, 1 << 20),
        "torch.storage.UntypedStorage": _Call(torch.UntypedStorage, 1 << 20),
        "builtins.set (with (a tensor))": _Call(set, view),
        # (torch's wrapper calls any allowed function: it is judged as that function)
        "builtins.bytearray": _Call(torch._tensor._rebuild_from_type_v2, bytearray,
                                    torch.Tensor, (1 << 20,), {}),
    }  # fmt: skip
    for k, (called, obj) in enumerate(calls.items()):
        path = _save({"w": obj}, tmp_path / f"t{k}.pt", True)
        said = "names" if called == "torch.FloatTensor" else "calls"  # (no class torch takes)
        with pytest.raises(UnsupportedError, match=rf"{said} {re.escape(called)}"):
            tensorfile.open(str(path))


@pytest.mark.parametrize("zipped", [False, True])
def test_a_stride_0_view_claiming_more_than_its_storage_is_refused(
    tmp_path: Path, zipped: bool
) -> None:
    """g03: ``torch.zeros(1).expand(n)`` stores one element; copying it made ``n``. i07:
    inside torch.load, ``OrderedDict((view,))`` unbinds it into ``n`` tensors: refused by
    the scan, before torch runs."""
    obj = {"w": torch.zeros(1, dtype=torch.uint8).expand(1 << 20)}
    path = _save(obj, tmp_path / "v.pt", zipped)
    with pytest.raises(
        FormatError,
        match=r"size \(1048576\), stride \(0\)\) has more elements than its storage of 1 "
        r"bytes holds from that offset \(it repeats elements\)",
    ):
        tensorfile.open(str(path))


def test_a_view_that_repeats_elements_is_refused_and_other_views_read(tmp_path: Path) -> None:
    base = torch.arange(12, dtype=torch.float32)
    path = _save({"w": base.as_strided((3, 3), (1, 1))}, tmp_path / "o.pt", True)
    with pytest.raises(UnsupportedError, match=r"stride \(1, 1\)\) has strides that may make"):
        tensorfile.open(str(path))
    m = base.reshape(3, 4)
    views = {"m": m, "t": m.T, "cols": m[:, ::2], "row": m[1], "tail": base[5:]}
    path = _save(views, tmp_path / "ok.pt", True)
    with tensorfile.open(str(path)) as f:
        for name, t in views.items():
            assert np.array_equal(f.get_tensor(name), t.numpy()), name


def test_a_tensor_of_more_than_64_dimensions_is_refused_by_name(tmp_path: Path) -> None:
    """i03: torch allows 65 dimensions, numpy does not: its ValueError reached the caller
    (the CLI said "internal error"); now an UnsupportedError: the reader refuses the rebuild
    as it reads it."""
    path = _save({"ok": torch.zeros([1] * 64), "w": torch.zeros([1] * 65)}, tmp_path / "d.pt", True)
    with pytest.raises(UnsupportedError, match=r"a tensor of the pickle has 65 dimensions"):
        tensorfile.open(str(path))


@pytest.mark.parametrize("zipped", [False, True])
def test_one_view_listed_many_times_is_copied_once(tmp_path: Path, zipped: bool) -> None:
    """g07: a transposed matrix listed 64 times (a memo reference each) was copied 64
    times; every name now shares one array."""
    m = torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64)
    path = _save({"w": [m.T] * 64, "again": m.T.clone().T.T}, tmp_path / "r.pt", zipped)
    with tensorfile.open(str(path)) as f:
        first = f.view("w.0")
        assert np.array_equal(first, m.T.numpy())
        for i in range(1, 64):
            assert np.shares_memory(f.view(f"w.{i}"), first), i


def test_distinct_views_copying_more_than_the_storages_hold_are_refused(tmp_path: Path) -> None:
    """Views of one storage that differ by their offset are distinct, each copied: past the
    bytes the pickle's storages hold twice, refused (a transpose beside its matrix reads)."""
    m = torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64)
    path = _save({"w": [m.T[:, k:] for k in range(12)]}, tmp_path / "d.pt", True)
    with pytest.raises(UnsupportedError, match=r"more than twice the 16,384 bytes they hold"):
        tensorfile.open(str(path))
    path = _save({"m": m, "t": m.T}, tmp_path / "ok.pt", True)
    with tensorfile.open(str(path)) as f:
        assert np.array_equal(f.get_tensor("t"), m.T.numpy())


def _uni(s: str) -> bytes:
    return b"X" + struct.pack("<I", len(s.encode())) + s.encode()


def _legacy_file(storage_class: bytes, numel: int, tail: bytes, held: int) -> bytes:
    """An old-format pickle holding one storage ``(storage_class, "0", "cpu", numel)``,
    ``tail`` after its persistent id, and ``held`` bytes of data after the pickles."""
    info = {
        "protocol_version": 1001,
        "little_endian": True,
        "type_sizes": {"short": 2, "int": 4, "long": 4},
    }
    count = b"\x8a" + bytes([9]) + numel.to_bytes(9, "little", signed=True)  # LONG1
    obj = (
        b"\x80\x02("
        + _uni("storage")
        + b"ctorch\n"
        + storage_class
        + b"\n"
        + _uni("0")
        + _uni("cpu")
        + count
        + b"NtQ"
        + tail
        + b"."
    )
    return (
        pickle.dumps(_MAGIC, protocol=2)
        + pickle.dumps(1001, protocol=2)
        + pickle.dumps(info, protocol=2)
        + obj
        + pickle.dumps(["0"], protocol=2)
        + struct.pack("<q", numel)
        + bytes(held)
    )


def _legacy_views(n: int, views: int) -> bytes:
    """An old-format pickle whose one storage of ``n * n + views`` float32 ones is viewed
    (a persistent id's ``view_metadata``) at offsets 1 to ``views``: each view the storage
    of one transposed ``n`` by ``n`` tensor (review35h h12's file)."""
    numel = n * n + views

    def memo(op: bytes, i: int) -> bytes:
        return op + struct.pack("<I", i)

    def long(v: int) -> bytes:
        return b"\x8a\x04" + struct.pack("<i", v)

    obj = b"\x80\x02}" + _uni("_g") + b"ctorch._utils\n_rebuild_tensor_v2\n" + memo(b"r", 1)
    obj += b"s" + _uni("_s") + b"ctorch\nFloatStorage\n" + memo(b"r", 2) + b"s"
    obj += _uni("_o") + b"ccollections\nOrderedDict\n" + memo(b"r", 3) + b"s"
    for i in range(views):
        view = b"(" + _uni(f"v{i}") + long(i + 1) + long(n * n) + b"t"
        pid = b"(" + _uni("storage") + memo(b"j", 2) + _uni("0") + _uni("cpu") + long(numel)
        size, stride = b"(" + long(n) + long(n) + b"t", b"(K\x01" + long(n) + b"t"
        args = b"(" + pid + view + b"tQK\x00" + size + stride + b"\x89" + memo(b"j", 3) + b")Rt"
        obj += _uni(f"t{i}") + memo(b"j", 1) + args + b"Rs"
    info = {
        "protocol_version": 1001,
        "little_endian": True,
        "type_sizes": {"short": 2, "int": 4, "long": 4},
    }
    return (
        pickle.dumps(_MAGIC, protocol=2)
        + pickle.dumps(1001, protocol=2)
        + pickle.dumps(info, protocol=2)
        + obj
        + b"."
        + pickle.dumps(["0"], protocol=2)
        + struct.pack("<q", numel)
        + np.ones(numel, "<f4").tobytes()
    )


def test_copies_of_views_of_one_storage_count_its_bytes_once(tmp_path: Path) -> None:
    """h12: 40 storage views of one 16 kB storage counted as 40 storages, so 40 transposed
    copies (40 times the file) were within "twice the bytes the storages hold"; the bytes
    are counted once now (and never more than the file's size): the third copy is refused,
    and a transposed view of one of them with the view itself reads."""
    path = tmp_path / "views.pt"
    path.write_bytes(_legacy_views(64, 40))
    said = r"more than twice the [\d,]+ bytes they hold \(at tensor 't2'\)"
    with pytest.raises(UnsupportedError, match=said):
        tensorfile.open(str(path))
    path.write_bytes(_legacy_views(64, 2))
    with tensorfile.open(str(path)) as f:
        assert f.keys() == ["t0", "t1"]
        assert np.array_equal(f.get_tensor("t1"), np.ones((64, 64), np.float32))


def test_a_legacy_tensor_class_counts_at_its_element_size(tmp_path: Path) -> None:
    """g02: a storage typed by ``torch.DoubleTensor`` counted 1 byte an element (torch
    allocates 8): a legacy tensor class is no storage class torch.save writes, refused."""
    data = _legacy_file(b"DoubleTensor", 4096, b"", 4096)
    path = tmp_path / "d.pt"
    path.write_bytes(data)
    with pytest.raises(UnsupportedError, match=r"names torch\.DoubleTensor, which tensorfile"):
        tensorfile.open(str(path))


def test_a_byte_the_scan_cannot_follow_is_refused_not_left_to_torch(tmp_path: Path) -> None:
    """g04: an opcode 0xff after a storage claiming 1 TiB made the scan give up, and torch
    allocated the claim before it reached the byte. A global torch refuses ends the scan
    (torch stops there), but the claims before it still count. Under a 4 GiB address space."""
    for tail, said in [
        (b"\xff", "FormatError not a PyTorch pickle tensorfile reads: an opcode "
         "tensorfile's pickle reader does not read (opcode 0xff at offset"),
        (b"cposix\nsystem\n", "UnsupportedError the pickle names posix.system, which "
         "tensorfile's pickle reader refuses"),
    ]:  # fmt: skip
        path = tmp_path / "b.pt"
        path.write_bytes(_legacy_file(b"FloatStorage", 1 << 38, tail, 64))
        printed, _peak = run_limited(OPEN_SAYS.format(path=str(path)), address_space=4 * GIB)
        assert printed.startswith(said), printed


def test_a_compressed_or_repeated_zip_record_is_refused(tmp_path: Path) -> None:
    """torch finds records case-insensitively and inflates a compressed one to the size it
    states: a deflated record, or two records torch cannot tell apart, are refused."""
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(4)}, buf)
    src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    for how in ("deflated", "twice"):
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as z:
            for info in src.infolist():
                method = zipfile.ZIP_DEFLATED if how == "deflated" else zipfile.ZIP_STORED
                z.writestr(info.filename, src.read(info), compress_type=method)
            if how == "twice":
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # (zipfile's "Duplicate name")
                    folder, name = src.infolist()[0].filename.split("/", 1)
                    z.writestr(f"{folder}/{name.upper()}", b"")  # (torch: one folder)
        path = tmp_path / f"{how}.pt"
        path.write_bytes(out.getvalue())
        with pytest.raises(
            FormatError, match="compressed" if how == "deflated" else "named like another"
        ):
            tensorfile.open(str(path))


def _everything(zipped: bool) -> dict[str, Any]:
    dtypes = [
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.complex64,
    ]
    if zipped:  # (torch's old-format loader reads no storage of these)
        dtypes += [torch.float8_e4m3fn, torch.float8_e5m2, torch.uint16, torch.uint32]
    lin = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(lin.parameters())
    lin(torch.ones(1, 3)).sum().backward()
    opt.step()
    return {
        "model": lin.state_dict(),
        "optimizer": opt.state_dict(),
        "param": torch.nn.Parameter(torch.ones(2)),
        "dtypes": {str(dt).split(".")[1]: torch.zeros(3, dtype=dt) for dt in dtypes},
        "values": {
            "s": {1, 2},
            "c": 1 + 2j,
            "b": b"ab",
            "ba": bytearray(b"xy"),
            "dt": torch.float32,
            "dev": torch.device("cpu"),
            "size": torch.Size([2, 3]),
            "od": collections.OrderedDict(a=1),
            "n": collections.Counter("aab"),
        },
        "epoch": 3,
    }


@pytest.mark.parametrize("zipped", [False, True])
def test_ordinary_checkpoints_pass_the_scan(tmp_path: Path, zipped: bool) -> None:
    obj = _everything(zipped)
    path = _save(obj, tmp_path / "all.pt", zipped)
    oracle = torch.load(path, weights_only=True)
    with tensorfile.open(str(path)) as f:
        assert f.get_tensor("model.weight").tolist() == oracle["model"]["weight"].tolist()
        assert "optimizer.state.0.exp_avg" in f.keys()
        assert f.get_tensor("dtypes.bfloat16").tolist() == [0, 0, 0]
        assert f.attributes["values"]["c"] == "(1+2j)" and f.attributes["epoch"] == 3
        if zipped:
            assert f.get_tensor("dtypes.uint32").tolist() == [0, 0, 0]


def _legacy_bytes(obj: object) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=False)
    return buf.getvalue()


def test_a_tensor_reaching_past_its_storage_is_refused(tmp_path: Path) -> None:
    """h01: an old-format rebuild whose size (or offset) reaches past its storage made
    torch's ``set_`` grow the storage to fit (a 337-byte file, a 512 MiB tensor); so did a
    storage the list of storage keys leaves out, never filled (old memory served as data)."""
    raw = _legacy_bytes({"w": torch.zeros(2)})
    old = b"K\x00K\x02\x85"  # offset 0, size (2,)
    assert raw.count(old) == 1
    path = tmp_path / "w.pt"
    for new, said in [
        (b"K\x00J" + struct.pack("<i", 1 << 20) + b"\x85", "reaches 4,194,304 bytes into a "
         "storage of 8: the file is not what it says"),
        (b"K\x01K\x02\x85", "offset 1, size (2), stride (1), F32) reaches 12 bytes into a "
         "storage of 8"),
    ]:  # fmt: skip
        path.write_bytes(raw.replace(old, new))
        with pytest.raises(FormatError, match=re.escape(said)):
            tensorfile.open(str(path))
    start = raw.rindex(b"\x80\x02]")  # the list of storage keys, left empty
    path.write_bytes(raw[:start] + b"\x80\x02]." + raw[raw.index(b".", start) + 1 :])
    with pytest.raises(FormatError, match=r"storage '\w+' is never read from the file"):
        tensorfile.open(str(path))


class _Stated:
    """Pickled as a tensor over ``storage`` then given ``(storage, 0, (n,), (1,))`` as its
    state: torch's unpickler calls ``tensor.set_(*state)``."""

    def __init__(self, storage: Any, n: int) -> None:
        self.storage, self.n = storage, n

    def __reduce__(self) -> tuple[Any, ...]:
        args = (self.storage, 0, (2,), (1,), False, collections.OrderedDict())
        return torch._utils._rebuild_tensor_v2, args, (self.storage, 0, (self.n,), (1,))


def test_a_layout_given_to_a_tensor_as_its_state_is_refused(tmp_path: Path) -> None:
    """h01: a BUILD state on a tensor is ``tensor.set_(*state)``, which grows an
    old-format storage to any size the state names."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (TypedStorage is deprecated)
        storage = torch.zeros(2).storage()
    path = _save({"w": _Stated(storage, 1 << 20)}, tmp_path / "s.pt", False)
    with pytest.raises(UnsupportedError, match=r"calls torch\.Tensor\.set_ \(with \(a storage"):
        tensorfile.open(str(path))


def test_a_deeply_nested_argument_is_refused_cleanly(tmp_path: Path) -> None:
    """h03: a tuple nested 100,000 deep given to a refused call made the refusal's text
    raise RecursionError; it is shown four levels deep."""
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, buf)
    src = zipfile.ZipFile(buf)
    records = {info.filename: src.read(info) for info in src.infolist()}
    deep = b"N" + b"\x85" * 100_000 + b"\x85R"  # bytearray(((((None,),),),...),)
    pkl = records["archive/data.pkl"]
    records["archive/data.pkl"] = pkl[:-1] + _uni("x") + b"cbuiltins\nbytearray\n" + deep + b"s."
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in records.items():
            z.writestr(name, data)
    path = tmp_path / "deep.pt"
    path.write_bytes(out.getvalue())
    with pytest.raises(UnsupportedError, match=re.escape("bytearray (with ((((((...)))))))")):
        tensorfile.open(str(path))


class _Built:
    """Pickled as ``func(*args)`` then given ``state`` (a BUILD): what torch's unpickler
    runs as ``tensor.set_(*state)`` on a tensor, ``__dict__.update(state)`` on a dict."""

    def __init__(self, func: Any, args: tuple[Any, ...], state: Any) -> None:
        self.func, self.args, self.state = func, args, state

    def __reduce__(self) -> tuple[Any, ...]:
        return self.func, self.args, self.state


@pytest.mark.parametrize("zipped", [False, True])
def test_any_state_given_to_a_tensor_is_refused(tmp_path: Path, zipped: bool) -> None:
    """i01: ``set_(*state)`` unpacks a list or a dict as well as a tuple; a tensor from a
    rebuild gets no state from ``torch.save`` (parameters and tensors with attributes
    carry theirs in their rebuild's arguments, and read as before)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (TypedStorage is deprecated)
        storage = torch.zeros(2).storage()
    rebuild = (storage, 0, (2,), (1,), False, collections.OrderedDict())
    for state, shown in [([storage, 0, [1 << 20]], "a list"), ({storage: 0}, "a dict")]:
        obj = {"w": _Built(torch._utils._rebuild_tensor_v2, rebuild, state)}
        path = _save(obj, tmp_path / "s.pt", zipped)
        with pytest.raises(UnsupportedError, match=rf"torch\.Tensor\.set_ \(with {shown} "):
            tensorfile.open(str(path))
    p, t, u = torch.nn.Parameter(torch.ones(2)), torch.ones(3, requires_grad=True), torch.ones(4)
    p.note, u.note = "p", "u"
    path = _save({"p": p, "t": t, "u": u}, tmp_path / "ok.pt", zipped)
    with tensorfile.open(str(path)) as f:
        assert [f.get_tensor(k).tolist() for k in "ptu"] == [[1.0] * 2, [1.0] * 3, [1.0] * 4]


def test_an_empty_storage_named_again_is_the_same_empty_storage(tmp_path: Path) -> None:
    """i01: torch's old-format loader gave a key whose first storage is empty a new storage
    each time it was named again, never filled from the file (whatever memory held before).
    tensorfile's reader gives one key one storage: named again, the same empty one."""
    again = b"(" + _uni("storage") + b"ctorch\nFloatStorage\n" + _uni("0") + _uni("cpu")
    path = tmp_path / "e.pt"
    path.write_bytes(_legacy_file(b"FloatStorage", 0, again + b"K\x00NtQ\x86", 0))
    with tensorfile.open(str(path)) as f:  # (bare storages: tensors of their bytes)
        assert f.keys() == ["0", "1"]
        assert [f.get_tensor(k).size for k in "01"] == [0, 0]


@pytest.mark.parametrize("zipped", [False, True])
def test_more_than_64_dimensions_are_refused_before_torch(tmp_path: Path, zipped: bool) -> None:
    """i02, i03: a size and stride of 65 dims (one memoized tuple serving many rebuilds
    made the scan quadratic; numpy refuses the tensor after) are refused unread."""
    ones = (1,) * 65
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        storage = torch.zeros(1).storage()
    for name, obj in [
        ("torch._utils._rebuild_tensor_v2", _Call(torch._utils._rebuild_tensor_v2, storage, 0,
                                                  ones, ones, False, collections.OrderedDict())),
        ("torch.Size", _Call(torch.Size, ones)),
    ]:  # fmt: skip
        path = _save({"w": torch.ones(2), "x": obj}, tmp_path / "d.pt", zipped)
        said = "calls torch.Size (with " if name == "torch.Size" else "has 65 dimensions"
        with pytest.raises(UnsupportedError, match=re.escape(said)):
            tensorfile.open(str(path))


def test_copies_of_one_memoized_argument_are_bounded(tmp_path: Path) -> None:
    """i04: one text encoded many times (a memo reference each) made torch hold every
    copy: each copying call is charged its argument's length, against the file's size."""
    text = "x" * (64 << 10)  # (pickle writes it once, then refers to it)
    obj = {"w": torch.ones(2), "t": [_Call(_codecs.encode, text, "latin1") for _ in range(1100)]}
    path = _save(obj, tmp_path / "c.pt", True)
    assert path.stat().st_size < 1 << 20
    with pytest.raises(FormatError, match=r"calls of _codecs\.encode copy 65,536 more items"):
        tensorfile.open(str(path))


def test_a_quantized_tensor_is_refused_before_torch_rebuilds_it(tmp_path: Path) -> None:
    """i05: ``_rebuild_qtensor`` builds its quantizer's parameters (a per-channel scale
    list any number of memo references long) inside torch.load; tensorfile reads no
    quantized tensor, so it is refused before."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (quantized tensors are deprecated)
        q = torch.quantize_per_channel(
            torch.ones(2, 3), torch.tensor([0.1, 0.2]), torch.tensor([0, 0]), 0, torch.qint8
        )
    path = _save({"q": q}, tmp_path / "q.pt", True)
    with pytest.raises(UnsupportedError, match=r"QInt8Storage, which tensorfile's pickle reader"):
        tensorfile.open(str(path))


@pytest.mark.parametrize("zipped", [False, True])
def test_a_tensor_unpacked_as_a_pair_is_refused(tmp_path: Path, zipped: bool) -> None:
    """i07: ``OrderedDict((t,))``, and a BUILD on an OrderedDict with state ``(t,)``,
    unbind ``t`` inside torch.load (one object per row of a stride-0 view)."""
    t = torch.ones(2)
    cases = {
        r"collections\.OrderedDict \(with \(\(a tensor\)\)\)": _Call(collections.OrderedDict, (t,)),
        r"object\.__setstate__ \(with \(a tensor\) as the state of a dict": _Built(
            collections.OrderedDict, (), (t,)),
        r"collections\.Counter \(with \(a list\)\)": _Call(collections.Counter, [t]),
    }  # fmt: skip
    for said, obj in cases.items():
        path = _save({"w": obj}, tmp_path / "o.pt", zipped)
        with pytest.raises(UnsupportedError, match=said):
            tensorfile.open(str(path))
