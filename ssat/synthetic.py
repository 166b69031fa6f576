"""Small synthetic datasets written in torchvision's real on-disk formats (no download, no network): the test
suite's data and what `python -m sweeps calibrate` times the real code on.

Images are class-dependent noise patterns so a model can learn something from them. The noise makes
every image differ between its channels, its rows and its columns (and from its transpose and mirror
images), so a loader that swaps channels, transposes, flips or misaligns labels cannot reproduce
`fake_arrays`, the arrays each writer stores.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

# name -> (classes, seed of the generator)
KINDS = {"cifar10": (10, 0), "cifar100": (100, 1), "svhn": (10, 2)}


def _images(n: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    rng.shuffle(y)
    base = rng.integers(0, 256, size=(classes, 3, 32, 32))
    x = (0.6 * base[y] + 0.4 * rng.integers(0, 256, size=(n, 3, 32, 32))).astype(np.uint8)
    return x, y


def fake_arrays(name: str, n_train: int, n_test: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What `WRITERS[name](root, n_train, n_test)` stores: x_train (N, 3, 32, 32) uint8 in (C, H, W) order,
    y_train (N,) class indices (SVHN: the digit, 0-9), x_test, y_test."""
    classes, seed = KINDS[name]
    x, y = _images(n_train + n_test, classes, seed)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def write_cifar10(root: str | Path, n_train: int = 600, n_test: int = 100) -> Path:
    d = Path(root) / "cifar-10-batches-py"
    d.mkdir(parents=True, exist_ok=True)
    xtr, ytr, xte, yte = fake_arrays("cifar10", n_train, n_test)
    # Five training batches like the real set; array_split keeps every image when n_train % 5 != 0.
    for i, (xb, yb) in enumerate(zip(np.array_split(xtr, 5), np.array_split(ytr, 5))):
        _dump(d / f"data_batch_{i + 1}", {"data": xb.reshape(len(xb), -1), "labels": yb.tolist()})
    _dump(d / "test_batch", {"data": xte.reshape(n_test, -1), "labels": yte.tolist()})
    return Path(root)


def write_cifar100(root: str | Path, n_train: int = 1000, n_test: int = 200) -> Path:
    d = Path(root) / "cifar-100-python"
    d.mkdir(parents=True, exist_ok=True)
    xtr, ytr, xte, yte = fake_arrays("cifar100", n_train, n_test)
    _dump(d / "train", {"data": xtr.reshape(n_train, -1), "fine_labels": ytr.tolist()})
    _dump(d / "test", {"data": xte.reshape(n_test, -1), "fine_labels": yte.tolist()})
    return Path(root)


def write_svhn(root: str | Path, n_train: int = 600, n_test: int = 100) -> Path:
    from scipy.io import savemat

    Path(root).mkdir(parents=True, exist_ok=True)
    xtr, ytr, xte, yte = fake_arrays("svhn", n_train, n_test)
    for name, x, y in (("train_32x32.mat", xtr, ytr), ("test_32x32.mat", xte, yte)):
        xs = np.transpose(x, (2, 3, 1, 0))  # (32, 32, 3, N) as SVHN stores it
        ys = y.reshape(-1, 1).copy()
        ys[ys == 0] = 10  # SVHN's label for digit 0
        savemat(Path(root) / name, {"X": xs, "y": ys})
    return Path(root)


def _dump(path: Path, obj: dict) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f)


WRITERS = {"cifar10": write_cifar10, "cifar100": write_cifar100, "svhn": write_svhn}
