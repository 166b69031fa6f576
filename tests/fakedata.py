"""Small synthetic datasets written in torchvision's real on-disk formats (no download, no network).

Images are class-dependent noise patterns so a model can learn something from them.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np


def _images(n: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    rng.shuffle(y)
    base = rng.integers(0, 256, size=(classes, 3, 32, 32))
    x = (0.6 * base[y] + 0.4 * rng.integers(0, 256, size=(n, 3, 32, 32))).astype(np.uint8)
    return x, y


def write_cifar10(root: str | Path, n_train: int = 600, n_test: int = 100) -> Path:
    d = Path(root) / "cifar-10-batches-py"
    d.mkdir(parents=True, exist_ok=True)
    x, y = _images(n_train + n_test, 10, 0)
    per = n_train // 5
    for i in range(5):
        sl = slice(i * per, (i + 1) * per)
        _dump(d / f"data_batch_{i + 1}", {"data": x[sl].reshape(per, -1), "labels": y[sl].tolist()})
    _dump(d / "test_batch", {"data": x[n_train:].reshape(n_test, -1), "labels": y[n_train:].tolist()})
    return Path(root)


def write_cifar100(root: str | Path, n_train: int = 1000, n_test: int = 200) -> Path:
    d = Path(root) / "cifar-100-python"
    d.mkdir(parents=True, exist_ok=True)
    x, y = _images(n_train + n_test, 100, 1)
    _dump(d / "train", {"data": x[:n_train].reshape(n_train, -1), "fine_labels": y[:n_train].tolist()})
    _dump(d / "test", {"data": x[n_train:].reshape(n_test, -1), "fine_labels": y[n_train:].tolist()})
    return Path(root)


def write_svhn(root: str | Path, n_train: int = 600, n_test: int = 100) -> Path:
    from scipy.io import savemat

    Path(root).mkdir(parents=True, exist_ok=True)
    x, y = _images(n_train + n_test, 10, 2)
    for name, sl in (("train_32x32.mat", slice(0, n_train)), ("test_32x32.mat", slice(n_train, None))):
        xs = np.transpose(x[sl], (2, 3, 1, 0))  # (32, 32, 3, N) as SVHN stores it
        ys = y[sl].reshape(-1, 1).copy()
        ys[ys == 0] = 10  # SVHN's label for digit 0
        savemat(Path(root) / name, {"X": xs, "y": ys})
    return Path(root)


def _dump(path: Path, obj: dict) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f)


WRITERS = {"cifar10": write_cifar10, "cifar100": write_cifar100, "svhn": write_svhn}
