"""CIFAR python batch files, read without trusting them.

A batch file is a pickle, and a pickle may name any importable callable: a file planted in --data-root would run
code when read. Even numpy's own reconstructors allocate whatever a file asks for (a 90-byte pickle can ask for
an array of 2 GB), and so do some of pickle's own opcodes in this Python (a counted bytes opcode allocates its
length before reading it; a memo index sizes the memo). So a batch is read in three steps, each refusing the
file in one line naming it:

1. the opcodes are scanned first: every counted length must lie within the file, every memo index follow the
   ones before it (as a pickler writes them);
2. the unpickler rebuilds only what the published files hold (dicts, lists, strings, bytes, numbers and numpy
   arrays through numpy's reconstructors, under numpy 1's and numpy 2's module names), and charges every array
   and numpy scalar against the file's size before it is made: together they can never hold more bytes than
   the file (plus SLACK);
3. the batch must be a dict whose `data` is a 2-D uint8 array of 3072 columns and whose labels are one class
   index per row.
"""
from __future__ import annotations

import hashlib
import io
import math
import operator
import pickle
import pickletools
from pathlib import Path

import numpy as np
from numpy._core import multiarray, numeric


class DataError(ValueError):
    """A data root, split or label file that does not fit the run."""


BATCH_GLOBALS = frozenset((module, name) for prefix in ("numpy.core", "numpy._core") for module, name in (
    (f"{prefix}.multiarray", "_reconstruct"), (f"{prefix}.multiarray", "scalar"),
    (f"{prefix}.numeric", "_frombuffer"))) | {("numpy", "ndarray"), ("numpy", "dtype")}
PIXELS = 3 * 32 * 32  # one image's bytes in a batch's `data` row
SLACK = 64            # bytes of arrays a file may ask for beyond its own size (none in a real batch)
MEMO_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})

# torchvision's list of the published files' MD5s (torchvision.datasets.CIFAR10/CIFAR100), for --verify.
PUBLISHED_MD5 = {
    "cifar-10-batches-py/data_batch_1": "c99cafc152244af753f735de768cd75f",
    "cifar-10-batches-py/data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "cifar-10-batches-py/data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "cifar-10-batches-py/data_batch_4": "634d18415352ddfa80567beed471001a",
    "cifar-10-batches-py/data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "cifar-10-batches-py/test_batch": "40351d587109b95175f43aff81a1287e",
    "cifar-100-python/train": "16019d7e3df5f24257cddd939b257f8d",
    "cifar-100-python/test": "f0ef6b0ae62326f3e7ffdfab6717acfc",
}
FOLDERS = {"cifar10": "cifar-10-batches-py/", "cifar100": "cifar-100-python/"}  # where each dataset's files lie
REPLACE = "Replace the file with the published one (`python -m ssat.datasets --download ...`, then `--verify`)"


class _Refused(pickle.UnpicklingError):
    """What the file asks for that is refused (a sentence, cut short)."""


def _global_refused(name: str) -> _Refused:
    return _Refused(f"a CIFAR batch holds only dicts, lists, strings, numbers and numpy arrays, and this file's "
                    f"pickle asks for {name[:200]}; nothing of it was run")


def scan_opcodes(data: bytes) -> None:
    """Check the pickle `data` before it is loaded: every counted length lies within it (UnpicklingError naming
    the short one, as pickletools reads it) and every memo index is at most the number of entries before it
    (_Refused)."""
    puts = 0
    try:
        for op, arg, _ in pickletools.genops(io.BytesIO(data)):
            if op.name in MEMO_PUTS:
                if arg > puts:
                    raise _Refused(f"its pickle puts memo entry {arg:,} after {puts:,} entries (a pickler writes "
                                   "them in order; this one would size the memo to it)")
                puts += 1
            elif op.name == "MEMOIZE":
                puts += 1
    except ValueError as exc:  # a length beyond the file (torn or forged), an unknown opcode, a bad argument
        raise pickle.UnpicklingError(str(exc)[:200]) from None


def _shape_size(shape) -> int:
    """The number of elements of an array shape given as an int or a sequence of ints (_Refused otherwise)."""
    try:
        dims = [operator.index(shape)] if not isinstance(shape, (tuple, list)) else [operator.index(d) for d in shape]
    except TypeError:
        raise _Refused(f"its pickle gives an array the shape {str(shape)[:100]}, not integers") from None
    if any(d < 0 for d in dims):
        raise _Refused(f"its pickle gives an array the negative shape {tuple(dims)}")
    return math.prod(dims)


class _BatchUnpickler(pickle.Unpickler):
    """The published files' globals only, each allocation charged against `budget` bytes before it is made."""

    def __init__(self, file, budget: int):
        super().__init__(file, encoding="latin1")
        self.budget = budget
        charge = self.charge

        class Array(np.ndarray):
            """An array this unpickler made: pickle's BUILD (__setstate__) on it is charged too."""

            def __setstate__(self, state):
                if not isinstance(state, tuple) or len(state) not in (4, 5):
                    raise _Refused("its pickle gives an array a state that is not numpy's")
                charge(state[-4], state[-3], "array")
                super().__setstate__(state)

        self.array = Array

    def charge(self, shape, dtype, what: str) -> None:
        """Take shape x itemsize bytes from the budget, or refuse: no object arrays, nothing past the budget."""
        a = "an" if what[0] in "aeiou" else "a"
        try:
            dt = np.dtype(dtype)
        except Exception:  # any value numpy cannot read as a dtype
            raise _Refused(f"its pickle gives {a} {what} the dtype {str(dtype)[:100]}, not one numpy reads") from None
        if dt.hasobject:
            raise _Refused(f"its pickle asks for {a} {what} of Python objects ({dt}), which a CIFAR batch never holds")
        need = _shape_size(shape) * dt.itemsize
        if need > self.budget:
            raise _Refused(f"its pickle asks for {a} {what} of {need:,} bytes ({dt}), more than the file can fill "
                           f"({self.budget:,} bytes left of its size + {SLACK}); nothing was allocated")
        self.budget -= need

    def find_class(self, module: str, name: str):
        if (module, name) not in BATCH_GLOBALS:
            raise _global_refused(f"{module}.{name}")
        return {"_reconstruct": self._reconstruct, "scalar": self._scalar, "_frombuffer": self._frombuffer,
                "ndarray": self._ndarray, "dtype": np.dtype}[name]

    def _ndarray(self, *args, **kwargs):
        """numpy.ndarray as the published files name it: only as _reconstruct's first argument, never called."""
        raise _global_refused("numpy.ndarray called directly")

    def _reconstruct(self, subtype, shape, dtype):
        if subtype != self._ndarray:
            raise _global_refused(f"numpy's _reconstruct of {str(subtype)[:100]}")
        self.charge(shape, dtype, "array")
        return multiarray._reconstruct(self.array, shape, dtype)

    def _scalar(self, dtype, *obj):
        self.charge((), dtype, "numpy scalar")
        return multiarray.scalar(dtype, *obj)

    def _frombuffer(self, buf, dtype, shape, order):
        self.charge(shape, dtype, "array")
        return numeric._frombuffer(buf, dtype, shape, order).view(self.array)


def unpickle_batch(path: Path, label_key: str) -> dict:
    """A CIFAR batch file: {"data": (N, 3072) uint8, label_key: (N,) labels, ...}; DataError naming the file when
    it is not one. Arrays come back as plain numpy arrays."""
    data = Path(path).read_bytes()
    try:
        scan_opcodes(data)
        d = _BatchUnpickler(io.BytesIO(data), len(data) + SLACK).load()
    except _Refused as exc:
        raise DataError(f"{path}: refused: {exc}. {REPLACE}") from None
    except Exception as exc:  # truncated, or not a pickle at all
        raise DataError(f"{path}: cannot be read as a CIFAR batch ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(d, dict) or "data" not in d or label_key not in d:
        raise DataError(f"{path}: not a CIFAR batch (expected a dict with 'data' and {label_key!r})")
    return {k: v.view(np.ndarray) if isinstance(v, np.ndarray) else v for k, v in d.items()}


def batch_arrays(path: Path, label_key: str, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """A batch file's images (N, 3, 32, 32) uint8 and labels (N,) int64, checked: DataError naming the file and
    what a batch holds when `data` is not a 2-D uint8 array of 3072 columns or the labels are not one class
    index in [0, classes) per row."""
    d = unpickle_batch(path, label_key)
    x, what = d["data"], f"a CIFAR batch holds 'data', an (N, {PIXELS}) uint8 array, and {label_key!r}, N labels"
    if not isinstance(x, np.ndarray) or x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != PIXELS:
        got = f"{x.dtype} array of shape {x.shape}" if isinstance(x, np.ndarray) else type(x).__name__
        raise DataError(f"{path}: 'data' is a {got}; {what}")
    try:
        y = np.asarray(d[label_key])
    except Exception:  # a ragged or odd list
        y = np.asarray(None)
    if y.shape != (len(x),) or y.dtype.kind not in "iu" or (len(y) and not 0 <= y.min() <= y.max() < classes):
        got = f"{y.dtype} of shape {y.shape}" + (f", {y.min()}..{y.max()}" if y.dtype.kind in "iu" and y.size else "")
        raise DataError(f"{path}: {label_key!r} are {got}; {what} in 0..{classes - 1} (here N = {len(x):,})")
    return x.reshape(-1, 3, 32, 32), y.astype(np.int64)



def verify_published(dataset: str, root: str) -> list[str]:
    """The files of `dataset` under `root` whose MD5 is not the published one (each with both MD5s)."""
    bad = []
    for name, want in PUBLISHED_MD5.items():
        if not name.startswith(FOLDERS.get(dataset, "?")):
            continue
        with open(Path(root) / name, "rb") as f:
            got = hashlib.file_digest(f, hashlib.md5).hexdigest()
        if got != want:
            bad.append(f"{Path(root) / name}: MD5 {got}, the published file's is {want}")
    return bad
