"""CIFAR batch files are read without running what a pickle asks for: only the published files' types are
rebuilt; anything else is refused, naming the file, before it is built. --verify compares with the published MD5s."""
import hashlib
import os
import pickle

import numpy as np
import pytest

from ssat import datasets
from ssat.datasets import DataError, load_arrays, verify_published
from ssat.synthetic import fake_arrays, write_cifar10, write_cifar100


class Planted:
    """What an attacker's pickle does: name a callable (here os.system) to be called while the file loads."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_the_synthetic_batches_load_as_before(tmp_path):
    write_cifar10(tmp_path, 50, 10)
    write_cifar100(tmp_path, 50, 10)
    a = load_arrays("cifar10", str(tmp_path))
    xtr, ytr, _, _ = fake_arrays("cifar10", 50, 10)
    assert np.array_equal(a.x_train.numpy(), xtr) and np.array_equal(a.y_train.numpy(), ytr)
    assert load_arrays("cifar100", str(tmp_path)).num_classes == 100


def test_a_planted_pickle_is_refused_naming_the_file_and_nothing_of_it_runs(tmp_path):
    write_cifar10(tmp_path, 50, 10)
    bad = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    marker = tmp_path / "ran"
    bad.write_bytes(pickle.dumps({"data": Planted(marker), "labels": [0]}))
    with pytest.raises(DataError) as err:
        load_arrays("cifar10", str(tmp_path))
    assert str(err.value).startswith(f"{bad}: refused: a CIFAR batch holds only dicts, lists, strings, numbers and "
                                     "numpy arrays, and this file's pickle asks for posix.system; nothing of it was "
                                     "run.")
    assert not marker.exists()


@pytest.mark.parametrize("payload", [b"cbuiltins\neval\n(S'1'\ntR.", b"cnumpy\nload\n(S'x'\ntR.",
                                     b"cnumpy.core.multiarray\n" + b"x" * 5000 + b"\n(tR."])
def test_any_other_global_is_refused_and_a_long_name_is_cut(tmp_path, payload):
    write_cifar100(tmp_path, 50, 10)
    bad = tmp_path / "cifar-100-python" / "test"
    bad.write_bytes(payload)
    with pytest.raises(DataError) as err:
        load_arrays("cifar100", str(tmp_path))
    assert str(err.value).startswith(f"{bad}: refused:") and len(str(err.value)) < 600


def test_a_torn_or_foreign_file_is_named(tmp_path):
    write_cifar10(tmp_path, 50, 10)
    torn = tmp_path / "cifar-10-batches-py" / "test_batch"
    torn.write_bytes(torn.read_bytes()[:1000])
    with pytest.raises(DataError, match=f"^{torn}: cannot be read as a CIFAR batch \\((UnpicklingError|EOFError): "):
        load_arrays("cifar10", str(tmp_path))  # the error's type is named
    for foreign in ([1, 2, 3], {"data": np.zeros((1, 3072), np.uint8)}, {"labels": [1]}):  # each key is required
        torn.write_bytes(pickle.dumps(foreign))
        with pytest.raises(DataError, match=f"^{torn}: not a CIFAR batch \\(expected a dict with 'data' and "
                                            "'labels'\\)"):
            load_arrays("cifar10", str(tmp_path))


def test_numpy_1_module_names_of_the_published_files_are_read(tmp_path):
    """The published batches were pickled under numpy 1 (numpy.core.multiarray._reconstruct)."""
    x = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072)
    old = pickle.dumps({"data": x, "labels": [3, 4], "filenames": [b"a.png", b"b.png"], "batch_label": b"b1"},
                       protocol=3).replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n")
    assert b"cnumpy.core.multiarray\n_reconstruct" in old
    path = tmp_path / "b"
    path.write_bytes(old)
    d = datasets._unpickle(path, "labels")
    assert np.array_equal(d["data"], x) and d["labels"] == [3, 4] and d["filenames"] == [b"a.png", b"b.png"]


def test_verify_names_each_file_that_is_not_the_published_one(tmp_path, monkeypatch):
    write_cifar100(tmp_path, 50, 10)
    train = tmp_path / "cifar-100-python" / "train"
    md5 = hashlib.md5(train.read_bytes()).hexdigest()
    monkeypatch.setitem(datasets.PUBLISHED_MD5, "cifar-100-python/train", md5)
    test = tmp_path / "cifar-100-python" / "test"
    assert verify_published("cifar100", str(tmp_path)) == [
        f"{test}: MD5 {hashlib.md5(test.read_bytes()).hexdigest()}, the published file's is "
        "f0ef6b0ae62326f3e7ffdfab6717acfc"]
    assert datasets.PUBLISHED_MD5["cifar-10-batches-py/data_batch_1"] == "c99cafc152244af753f735de768cd75f"
