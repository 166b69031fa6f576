"""CIFAR batch files are read without running what a pickle asks for: only the published files' types are
rebuilt; anything else is refused, naming the file, before it is built; nothing a file asks for is allocated beyond
its own size; a batch of the wrong shape or labels is one line naming the file. --verify compares with the
published MD5s."""
import hashlib
import os
import pickle
import resource
import struct

import numpy as np
import pytest

from ssat import cifar_files
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
    d = cifar_files.unpickle_batch(path, "labels")
    assert np.array_equal(d["data"], x) and d["labels"] == [3, 4] and d["filenames"] == [b"a.png", b"b.png"]


def test_verify_names_each_file_that_is_not_the_published_one(tmp_path, monkeypatch):
    write_cifar100(tmp_path, 50, 10)
    train = tmp_path / "cifar-100-python" / "train"
    md5 = hashlib.md5(train.read_bytes()).hexdigest()
    monkeypatch.setitem(cifar_files.PUBLISHED_MD5, "cifar-100-python/train", md5)
    test = tmp_path / "cifar-100-python" / "test"
    assert verify_published("cifar100", str(tmp_path)) == [
        f"{test}: MD5 {hashlib.md5(test.read_bytes()).hexdigest()}, the published file's is "
        "f0ef6b0ae62326f3e7ffdfab6717acfc"]
    assert cifar_files.PUBLISHED_MD5["cifar-10-batches-py/data_batch_1"] == "c99cafc152244af753f735de768cd75f"


class Huge:
    """A pickle that names only the allowed numpy reconstructor, asking it for an array of 2.2 GB."""

    def __reduce__(self):
        return np._core.multiarray._reconstruct, (np.ndarray, (2_200_000_000,), b"b")


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("payload, says", [
    (pickle.dumps({"data": Huge(), "labels": [0]}, protocol=3), "asks for an array of 2,200,000,000 bytes (int8)"),
    (b"\x80\x02N" + b"r" + struct.pack("<I", 2**30) + b".", "puts memo entry 1,073,741,824 after 0 entries"),
])
def test_a_small_pickle_cannot_make_the_loader_allocate_more_than_the_file(tmp_path, payload, says):
    assert len(payload) < 200
    write_cifar10(tmp_path, 50, 10)
    bad = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    bad.write_bytes(payload)
    before = _peak_mib()
    with pytest.raises(DataError) as err:
        load_arrays("cifar10", str(tmp_path))
    assert str(err.value).startswith(f"{bad}: refused: its pickle ") and says in str(err.value), str(err.value)
    assert "\n" not in str(err.value) and _peak_mib() - before < 200  # nothing near 2 GB was ever allocated


def test_a_counted_length_beyond_the_file_is_refused_before_it_is_allocated(tmp_path):
    bad = tmp_path / "b"
    bad.write_bytes(b"\x80\x04\x8e" + struct.pack("<Q", 2**40) + b"xx.")  # BINBYTES8 of 1 TB in a 13-byte file
    with pytest.raises(DataError, match=rf"^{bad}: cannot be read as a CIFAR batch \(UnpicklingError: "):
        cifar_files.unpickle_batch(bad, "labels")


@pytest.mark.parametrize("batch, says", [
    ({"data": np.zeros((2, 100), np.uint8), "labels": [0, 1]}, "'data' is a uint8 array of shape (2, 100)"),
    ({"data": np.zeros((2, 3072), np.float32), "labels": [0, 1]}, "'data' is a float32 array of shape (2, 3072)"),
    ({"data": [1, 2], "labels": [0, 1]}, "'data' is a list"),
    ({"data": np.zeros((2, 3072), np.uint8), "labels": [0]}, "'labels' are int64 of shape (1,), 0..0"),
    ({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 10]}, "'labels' are int64 of shape (2,), 0..10"),
    ({"data": np.zeros((2, 3072), np.uint8), "labels": [-1, 3]}, "'labels' are int64 of shape (2,), -1..3"),
    ({"data": np.zeros((2, 3072), np.uint8), "labels": ["a", "b"]}, "'labels' are <U1 of shape (2,)"),
])
def test_a_batch_of_the_wrong_shape_or_labels_is_one_line_naming_the_file(tmp_path, batch, says):
    write_cifar10(tmp_path, 50, 10)
    bad = tmp_path / "cifar-10-batches-py" / "test_batch"
    bad.write_bytes(pickle.dumps(batch))
    with pytest.raises(DataError) as err:
        load_arrays("cifar10", str(tmp_path))
    msg = str(err.value)
    assert msg.startswith(f"{bad}: ") and says in msg and "\n" not in msg, msg
    assert "a CIFAR batch holds 'data', an (N, 3072) uint8 array, and 'labels', N labels" in msg


def test_a_published_batch_in_range_gives_images_and_int64_labels(tmp_path):
    path = tmp_path / "b"
    path.write_bytes(pickle.dumps({"data": np.arange(2 * 3072).astype(np.uint8).reshape(2, 3072),
                                   "labels": np.array([0, 9], np.uint8)}))
    x, y = cifar_files.batch_arrays(path, "labels", 10)
    assert x.shape == (2, 3, 32, 32) and x.dtype == np.uint8 and x[1, 0, 0, 0] == 3072 % 256
    assert y.tolist() == [0, 9] and y.dtype == np.int64
    with pytest.raises(DataError, match="in 0..8"):
        cifar_files.batch_arrays(path, "labels", 9)


# ---- each refusal and each allowed reconstructor, pinned (mutation testing found them loose) -------------------
class Reconstructed:
    """numpy's _reconstruct of an uninitialised int8 array of `n` elements, with an optional BUILD `state`."""

    def __init__(self, n, state=None, subtype=np.ndarray):
        self.n, self.state, self.subtype = n, state, subtype

    def __reduce__(self):
        args = (np._core.multiarray._reconstruct, (self.subtype, (self.n,), b"b"))
        return args if self.state is None else (*args, self.state)


def load(payload: bytes, budget: int | None = None):
    """What the batch unpickler rebuilds from `payload` (its scan first, as unpickle_batch does)."""
    cifar_files.scan_opcodes(payload)
    return cifar_files._BatchUnpickler(__import__("io").BytesIO(payload), budget or len(payload) + 64).load()


def test_the_budget_is_the_files_size_plus_slack_and_every_array_draws_on_it(tmp_path):
    def batch(n, m=0):
        return pickle.dumps({"data": Reconstructed(n), "more": Reconstructed(m), "labels": [0]}, protocol=3)
    size = len(batch(200))
    assert all(len(batch(n)) == size for n in (size + 64, size + 65))  # one-byte ints: the same file size
    path = tmp_path / "b"
    path.write_bytes(batch(size + 64))  # exactly the budget: allowed
    d = cifar_files.unpickle_batch(path, "labels")
    assert d["data"].shape == (size + 64,) and type(d["data"]) is np.ndarray  # a plain array, not the loader's own
    assert d["data"].dtype == np.int8  # the dtype the pickle gave _reconstruct (no BUILD state follows it here)
    path.write_bytes(batch(size + 65))
    with pytest.raises(DataError, match=rf"asks for an array of {size + 65:,} bytes \(int8\), more than the file can "
                                        rf"fill \({size + 64:,} bytes left of its size \+ 64\); nothing was allocated"):
        cifar_files.unpickle_batch(path, "labels")
    half = (size + 64) // 2 + 1  # each within the budget, both together not
    path.write_bytes(batch(half, half))
    with pytest.raises(DataError, match=rf"asks for an array of {half:,} bytes \(int8\), more than the file can fill "
                                        rf"\({size + 64 - half:,} bytes left"):
        cifar_files.unpickle_batch(path, "labels")


def test_shapes_are_integers_and_not_negative():
    assert (cifar_files._shape_size(5), cifar_files._shape_size((2, 3)), cifar_files._shape_size([4])) == (5, 6, 4)
    with pytest.raises(cifar_files._Refused) as err:
        cifar_files._shape_size(("a",) + ("b",) * 60)
    assert str(err.value) == f"its pickle gives an array the shape {str(('a',) + ('b',) * 60)[:100]}, not integers"
    with pytest.raises(cifar_files._Refused) as err:
        cifar_files._shape_size((2, -1))
    assert str(err.value) == "its pickle gives an array the negative shape (2, -1)"


def test_a_state_that_is_not_numpys_is_refused_and_numpys_old_four_field_state_is_read():
    ok = load(pickle.dumps(Reconstructed(0, ((2,), np.dtype("u1"), False, b"ab")), protocol=3))
    assert ok.tolist() == [97, 98] and ok.dtype == np.uint8
    with pytest.raises(cifar_files._Refused) as err:
        load(pickle.dumps(Reconstructed(0, "x"), protocol=3))
    assert str(err.value) == "its pickle gives an array a state that is not numpy's"
    with pytest.raises(cifar_files._Refused, match=r"^its pickle asks for an array of 4,000,000,000 bytes \(uint8\)"):
        load(pickle.dumps(Reconstructed(0, (1, (4_000_000_000,), np.dtype("u1"), False, b"")), protocol=3))


def test_dtypes_numpy_cannot_read_or_of_objects_are_refused_with_the_right_article():
    u = cifar_files._BatchUnpickler(__import__("io").BytesIO(b""), 100)
    with pytest.raises(cifar_files._Refused) as err:
        u.charge((1,), "x" * 300, "array")
    assert str(err.value) == f"its pickle gives an array the dtype {'x' * 100}, not one numpy reads"
    with pytest.raises(cifar_files._Refused) as err:
        u.charge((), object, "numpy scalar")
    assert str(err.value) == ("its pickle asks for a numpy scalar of Python objects (object), which a CIFAR batch "
                              "never holds")
    u.charge((10,), "u1", "array")
    assert u.budget == 90


def test_numpy_scalars_and_protocol_5_arrays_are_rebuilt_and_charged():
    x = np.arange(6, dtype=np.int16).reshape(2, 3)
    got = load(pickle.dumps({"s": np.int64(7), "f": np.float32(0.5), "x": x}, protocol=5))
    assert got["s"] == 7 and got["s"].dtype == np.int64 and got["f"] == np.float32(0.5)
    assert np.array_equal(got["x"], x) and got["x"].dtype == np.int16
    assert b"_frombuffer" in pickle.dumps(x, protocol=5)  # the reconstructor this pickle took
    with pytest.raises(cifar_files._Refused, match=r"asks for a numpy scalar of 8 bytes \(int64\)"):
        load(pickle.dumps(np.int64(7), protocol=3), budget=7)
    with pytest.raises(cifar_files._Refused, match=r"asks for an array of 12 bytes \(int16\)"):
        load(pickle.dumps(x, protocol=5), budget=11)


def test_the_reconstructor_builds_arrays_only_and_ndarray_is_never_called():
    with pytest.raises(cifar_files._Refused) as err:
        load(pickle.dumps(Reconstructed(2, subtype=np.dtype), protocol=3))
    assert str(err.value) == ("a CIFAR batch holds only dicts, lists, strings, numbers and numpy arrays, and this "
                              f"file's pickle asks for numpy's _reconstruct of {str(np.dtype)}; nothing of it was run")
    with pytest.raises(cifar_files._Refused) as err:
        load(b"cnumpy\nndarray\n(K\x02tR.")
    assert str(err.value).endswith("asks for numpy.ndarray called directly; nothing of it was run")
    name = "x" * 5000
    assert str(cifar_files._global_refused(name)).count("x") == 200
    with pytest.raises(cifar_files._Refused) as err:
        load(pickle.dumps(Reconstructed(2, subtype="y" * 300), protocol=3))
    assert "y" * 100 in str(err.value) and "y" * 101 not in str(err.value)  # the subtype's text cut short


def test_python_2_strings_of_the_published_files_read_as_latin1():
    assert load(b"\x80\x02U\x02\xe9a.") == "\xe9a"


def test_memo_entries_are_counted_by_every_put_and_memoize():
    def memo(*ops):  # each op pushes None and memoizes it (MEMOIZE) or puts it at an index (BINPUT i)
        body = b"".join(b"N\x94" if op == "m" else b"Nq" + bytes([op]) for op in ops)
        return b"\x80\x04" + body + b"0" * (len(ops) - 1) + b"."
    assert load(memo("m", "m", 2)) is None and load(memo(0, 1, 2)) is None  # each index follows the ones before
    for ops, index, after in ((("m", "m", 3), 3, 2), ((0, 2), 2, 1)):
        with pytest.raises(cifar_files._Refused) as err:
            load(memo(*ops))
        assert str(err.value) == (f"its pickle puts memo entry {index} after {after} entries (a pickler writes them in "
                                  "order; this one would size the memo to it)")


def test_a_counted_length_beyond_the_file_is_named_as_pickletools_reads_it(tmp_path):
    bad = tmp_path / "b"
    bad.write_bytes(b"\x80\x04\x8e" + struct.pack("<Q", 2**40) + b"xx.")
    with pytest.raises(DataError) as err:
        cifar_files.unpickle_batch(bad, "labels")
    assert str(err.value) == (f"{bad}: cannot be read as a CIFAR batch (UnpicklingError: expected {2**40} bytes in a "
                              "bytes8, but only 3 remain)")


def test_labels_must_be_integers_within_the_classes(tmp_path):
    path = tmp_path / "b"
    for labels, says in ((np.array([1.0, 2.0]), "'labels' are float64 of shape (2,);"),
                         (np.array([True, False]), "'labels' are bool of shape (2,);"),
                         ([[0, 1], [2]], "'labels' are object of shape ()"),
                         ([3, 3], None)):
        path.write_bytes(pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": labels}))
        if says is None:  # equal labels at the top of the range are fine
            assert cifar_files.batch_arrays(path, "labels", 4)[1].tolist() == [3, 3]
            continue
        with pytest.raises(DataError) as err:
            cifar_files.batch_arrays(path, "labels", 10)
        assert says in str(err.value), str(err.value)


def test_verify_looks_only_at_the_named_datasets_files(tmp_path):
    write_cifar10(tmp_path, 50, 10)
    assert len(verify_published("cifar10", str(tmp_path))) == 6  # synthetic files: none is the published one
    assert verify_published("svhn", str(tmp_path)) == []  # no CIFAR folder of its own: nothing to compare


def test_an_array_state_must_be_numpys_tuple_and_fortran_order_is_kept():
    with pytest.raises(cifar_files._Refused, match="a state that is not numpy's"):
        load(pickle.dumps(Reconstructed(0, [1, (2,), np.dtype("u1"), False, b"ab"]), protocol=3))  # a list, not a tuple
    f = np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3))
    got = load(pickle.dumps(f, protocol=5))
    assert np.array_equal(got, f) and got.flags.f_contiguous
