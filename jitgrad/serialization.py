"""``torch.save`` / ``torch.load`` in torch's own file format, so checkpoints move both ways between jitgrad and
PyTorch (``torch.load(..., weights_only=True)`` included).

The format (torch >= 1.6): an uncompressed zip archive ``<name>/`` holding ``data.pkl`` (a protocol-2 pickle of
the object), ``data/<key>`` (the raw little-endian bytes of each storage), ``version``, ``byteorder`` and a few
small records; each storage's bytes start on a 64-byte boundary, as torch writes them.  In the pickle a tensor
is ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, OrderedDict())`` with the
storage a persistent id ``('storage', torch.FloatStorage, key, 'cpu', numel)``; a Parameter wraps that in
``torch._utils._rebuild_parameter``.  Writing needs no torch: a pure-Python pickler emits those globals by name.
Reading maps them back to jitgrad (tensors sharing a storage, like tied weights, share memory again).
"""
from __future__ import annotations

import collections
import io
import os
import pickle
import secrets
import struct
import zipfile

import numpy as np

from .ir import dtypes as dt
from .runtime.tensor import Device, Tensor
from .runtime.view_rule import contiguous_strides

_STORAGE_OF = {"float32": "FloatStorage", "float64": "DoubleStorage", "int64": "LongStorage",
               "int32": "IntStorage", "bool": "BoolStorage", "uint8": "ByteStorage", "int16": "ShortStorage",
               "int8": "CharStorage", "float16": "HalfStorage"}
_NP_OF_STORAGE = {s: np.dtype(n) for n, s in _STORAGE_OF.items()}
_ALIGN = 64


# the dtypes a torch pickle names (``torch.float32``, and the aliases ``torch.float``...)
_DTYPES_BY_TORCH_NAME = {"float32": dt.float32, "float64": dt.float64, "int64": dt.int64, "int32": dt.int32,
                         "bool": dt.bool_, "uint8": dt.uint8, "float": dt.float32, "double": dt.float64,
                         "long": dt.int64, "int": dt.int32}


class _Global:
    """A global a pickle names (``torch._utils._rebuild_tensor_v2``) without importing it."""

    __slots__ = ("module", "name")

    def __init__(self, module, name):
        self.module, self.name = module, name

    def __call__(self, *args):      # pickle's save_reduce requires a callable; it is only ever written by name
        raise TypeError(f"{self.module}.{self.name} is a name in a checkpoint, not a function")


_GLOBALS: dict = {}


def _g(module, name) -> _Global:
    g = _GLOBALS.get((module, name))
    if g is None:
        g = _GLOBALS[(module, name)] = _Global(module, name)
    return g


class _Storage:
    """A storage being written: its key in ``data/`` and its flat array."""

    __slots__ = ("key", "array")

    def __init__(self, key, array):
        self.key, self.array = key, array


class _Writer(pickle._Pickler):
    """Pickles jitgrad tensors as torch's rebuild calls, and torch's globals by name."""

    def __init__(self, file):
        super().__init__(file, protocol=2)
        self.storages: dict = {}     # id(root array) -> _Storage
        self._keep = []              # the roots, alive until the archive is written

    def save(self, obj, save_persistent_id=True):
        if type(obj) is _Global:
            x = self.memo.get(id(obj))
            if x is not None:
                self.write(self.get(x[0]))
                return
            self.write(pickle.GLOBAL + obj.module.encode() + b"\n" + obj.name.encode() + b"\n")
            self.memoize(obj)
            return
        if isinstance(obj, dt.DType):       # torch pickles a dtype as the global torch.<name>
            self.save(_g("torch", obj.name))
            return
        super().save(obj, save_persistent_id)

    def persistent_id(self, obj):
        if type(obj) is _Storage:
            a = obj.array
            return ("storage", _g("torch", _STORAGE_OF[a.dtype.name]), obj.key, "cpu", int(a.size))
        return None

    def reducer_override(self, obj):
        if isinstance(obj, Tensor):
            return self._tensor(obj)
        if isinstance(obj, Device):
            return _g("torch", "device"), (str(obj),)
        return NotImplemented

    def _tensor(self, t):
        from .nn.parameter import Parameter
        d = t.detach().cpu()._data if not isinstance(t._data, np.ndarray) else t._data
        if d.dtype.name not in _STORAGE_OF:
            raise pickle.PicklingError(f"torch.save: tensors of dtype {d.dtype} cannot be saved")
        storage, offset, stride = self._storage_of(d)
        param = isinstance(t, Parameter)
        rebuilt = (_g("torch._utils", "_rebuild_tensor_v2"), (storage, offset, tuple(d.shape), stride,
                                                              bool(t.requires_grad) and not param,
                                                              collections.OrderedDict()))
        if param:
            return _g("torch._utils", "_rebuild_parameter"), (_Rebuilt(*rebuilt), bool(t.requires_grad),
                                                              collections.OrderedDict())
        return rebuilt

    def _storage_of(self, d):
        """(storage, offset, stride in elements): a view of an owned C-contiguous array of the same dtype shares
        its root's storage (so tied weights stay tied); anything else is written as its own contiguous copy."""
        root = d
        while isinstance(root.base, np.ndarray):
            root = root.base
        item = d.itemsize
        if root is not d and (root.dtype != d.dtype or not root.flags.c_contiguous or any(s < 0 for s in d.strides)
                              or any(s % item for s in d.strides)):
            root = None
        if root is None or (root is d and not d.flags.c_contiguous):
            d = np.ascontiguousarray(d)
            root = d
        st = self.storages.get(id(root))
        if st is None:
            st = self.storages[id(root)] = _Storage(str(len(self.storages)), root.reshape(-1))
            self._keep.append(root)
        offset = (d.__array_interface__["data"][0] - root.__array_interface__["data"][0]) // item if d.size else 0
        stride = tuple(s // item for s in d.strides) if d.ndim else ()
        if d.size and d.ndim and d.flags.c_contiguous:
            stride = contiguous_strides(d.shape)      # every dim >= 1 here (d.size)
        return st, offset, stride


class _Rebuilt:
    """A nested reduce (the tensor inside ``_rebuild_parameter``)."""

    __slots__ = ("fn", "args")

    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def _open_for_write(f):
    if isinstance(f, (str, os.PathLike)):
        return open(f, "wb"), True
    return f, False


def save(obj, f, pickle_module=None, pickle_protocol=2, _use_new_zipfile_serialization=True,
         _disable_byteorder_record=False):
    """Write ``obj`` (tensors, state dicts, optimiser state, nested containers of them and of plain Python
    values) to ``f`` (a path or a binary file) in torch's zip format: ``torch.load`` reads it."""
    if not _use_new_zipfile_serialization:
        from .library.torch_surface import UnsupportedError
        raise UnsupportedError("jitgrad does not support the legacy (pre-1.6) torch.save format; it writes the "
                               "zip format only")
    buf = io.BytesIO()
    w = _Writer(buf)
    w.dump(obj)
    fh, close = _open_for_write(f)
    name = "archive"
    if isinstance(f, (str, os.PathLike)):
        name = os.path.splitext(os.path.basename(os.fspath(f)))[0] or "archive"
    try:
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as z:
            records = [("data.pkl", buf.getvalue()), (".format_version", b"1"), (".storage_alignment", b"64")]
            if not _disable_byteorder_record:
                records.append(("byteorder", b"little"))
            for st in sorted(w.storages.values(), key=lambda s: int(s.key)):
                records.append((f"data/{st.key}", np.ascontiguousarray(st.array).astype(
                    st.array.dtype.newbyteorder("<"), copy=False).tobytes()))
            records += [("version", b"3\n"), (".data/serialization_id", str(secrets.randbits(128)).encode())]
            for rec, data in records:
                _write_aligned(z, fh, f"{name}/{rec}", data)
    finally:
        if close:
            fh.close()


def _write_aligned(z, fh, arcname, data):
    """One stored record whose bytes start on a 64-byte boundary (an extra field pads the local header)."""
    info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    start = z.start_dir if hasattr(z, "start_dir") else fh.tell()
    header = 30 + len(arcname.encode())
    pad = (-(start + header + 4)) % _ALIGN
    info.extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad     # 'FB', torch's padding field
    z.writestr(info, data)


# ---- load -------------------------------------------------------------------------------------------

class _Reader(pickle.Unpickler):
    """Maps torch's globals to jitgrad and storages to arrays read from the archive."""

    def __init__(self, file, zf, prefix, weights_only, locate):
        super().__init__(file)
        self.zf, self.prefix, self.weights_only, self.locate = zf, prefix, weights_only, locate
        self.arrays: dict = {}
        self.devices: dict = {}         # id(storage array) -> the device its tensors go to (None: the CPU)

    def find_class(self, module, name):
        if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_tensor"):
            return self._rebuild_tensor
        if module == "torch._utils" and name == "_rebuild_parameter":
            return _rebuild_parameter
        if module == "torch._utils" and name == "_rebuild_parameter_with_state":
            return lambda data, rg, hooks, state: _rebuild_parameter(data, rg, hooks)
        if module == "torch" and name in _NP_OF_STORAGE:
            return _StorageType(name)
        if module == "torch" and name in _DTYPES_BY_TORCH_NAME:
            return _DTYPES_BY_TORCH_NAME[name]
        if module == "torch" and name == "device":
            return Device
        if (module, name) in (("collections", "OrderedDict"), ("builtins", "set"), ("builtins", "frozenset"),
                              ("builtins", "complex"), ("builtins", "slice"), ("builtins", "bytearray")):
            return super().find_class(module, name)
        if self.weights_only:
            raise pickle.UnpicklingError(
                f"Weights only load failed: unsupported global {module}.{name} (jitgrad.load(..., "
                f"weights_only=True) reads tensors, containers and plain values only; pass weights_only=False "
                f"for a checkpoint you trust)")
        if module.startswith("torch"):
            from .library.torch_surface import UnsupportedError
            raise UnsupportedError(f"jitgrad cannot load the torch object {module}.{name} from a checkpoint")
        return super().find_class(module, name)

    def persistent_load(self, pid):
        kind, stype, key, location, numel = pid[:5]
        if kind != "storage":
            raise pickle.UnpicklingError(f"torch.load: unknown persistent id {kind!r}")
        a = self.arrays.get(key)
        if a is None:
            raw = self.zf.read(f"{self.prefix}data/{key}")
            a = np.frombuffer(raw, dtype=stype.dtype.newbyteorder("<"), count=int(numel)).astype(stype.dtype)
            a, device = self.locate(a, str(location))
            self.arrays[key] = a
            self.devices[id(a)] = device
        return a

    def _rebuild_tensor(self, storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                        metadata=None):
        size, stride = tuple(size), tuple(stride)
        item = storage.itemsize
        if storage.size == 0 or 0 in size:
            a = np.zeros(size, storage.dtype)
        else:
            a = np.lib.stride_tricks.as_strided(storage[storage_offset:], size, tuple(s * item for s in stride))
        t = Tensor._make(a)
        device = self.devices.get(id(storage))
        if device is not None and device != "cpu":
            t = t.to(device)
        if requires_grad:
            t.requires_grad_(True)
        return t


class _StorageType:
    """``torch.FloatStorage`` and the like, as a storage's dtype."""

    def __init__(self, name):
        self.dtype = _NP_OF_STORAGE[name]


def _rebuild_parameter(data, requires_grad, backward_hooks=None):
    from .nn.parameter import Parameter
    return Parameter(data.detach(), requires_grad=requires_grad)


def _locator(map_location):
    """torch's ``map_location`` as ``(storage array, saved location) -> (array, device or None)``: None (where
    saved; jitgrad reads every storage into host memory), a device (str or ``jitgrad.device``) for all storages,
    a dict from saved locations to devices (others stay), or a callable ``(storage, location)`` returning the
    storage to use (here the storage is the NumPy array read from the file; a tensor is accepted too, and None
    means the default)."""
    if map_location is None:
        return lambda a, loc: (a, None)
    if isinstance(map_location, (str, Device)):
        target = str(map_location)
        return lambda a, loc: (a, target)
    if isinstance(map_location, dict):
        table = {str(k): str(v) for k, v in map_location.items()}
        return lambda a, loc: (a, table.get(loc))
    if callable(map_location):
        def call(a, loc):
            r = map_location(a, loc)
            if r is None:
                return a, None
            if isinstance(r, Tensor):
                return np.asarray(r.detach().cpu().numpy()).reshape(-1), str(r.device)
            if isinstance(r, np.ndarray):
                return r.reshape(-1), None
            raise TypeError(f"jitgrad.load: map_location returned a {type(r).__name__}; expected the storage it "
                            f"was given (a NumPy array here), a tensor, or None")
        return call
    raise TypeError(f"jitgrad.load: map_location should be a device, a str, a dict or a callable, not "
                    f"{type(map_location).__name__}")


def load(f, map_location=None, pickle_module=None, *, weights_only=True, mmap=None, **pickle_load_args):
    """Read an object that ``torch.save`` or ``jitgrad.save`` wrote (torch's zip format); tensors come back as
    jitgrad tensors (Parameters as Parameters), on ``map_location`` if given.  ``weights_only=True`` (torch's
    default) refuses pickled globals other than tensors, containers and plain values."""
    locate = _locator(map_location)
    fh, close = (open(f, "rb"), True) if isinstance(f, (str, os.PathLike)) else (f, False)
    try:
        if not zipfile.is_zipfile(fh):
            raise RuntimeError("jitgrad.load: not a torch zip checkpoint (the legacy pre-1.6 format and "
                               "TorchScript archives are not supported)")
        fh.seek(0)
        with zipfile.ZipFile(fh) as z:
            names = z.namelist()
            pkl = next((n for n in names if n.endswith("/data.pkl") and n.count("/") == 1), None)
            if pkl is None:
                raise RuntimeError("jitgrad.load: the archive has no data.pkl record")
            prefix = pkl[:-len("data.pkl")]
            if f"{prefix}byteorder" in names and z.read(f"{prefix}byteorder") != b"little":
                raise RuntimeError("jitgrad.load: big-endian checkpoints are not supported")
            r = _Reader(io.BytesIO(z.read(pkl)), z, prefix, weights_only, locate)
            return r.load()
    finally:
        if close:
            fh.close()


__all__ = ["save", "load"]
