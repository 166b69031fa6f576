"""make_split at its edges, on 60 synthetic labels: the validation set never takes an imported labeled image,
a fully labeled split labels everything but the validation set, and the size check counts what it should."""
import numpy as np
import pytest

from ssat.datasets import DataError, make_split

Y = np.arange(60) % 10


def test_imported_labels_are_held_out_of_the_validation_draw():
    idx = np.arange(0, 60, 3)  # 20 imported indices
    s = make_split("mnist5k", Y, split_seed=0, n_val=30, labeled_idx=idx)
    assert s.labeled.tolist() == idx.tolist() and not set(s.val) & set(idx)
    # the validation set may take every image that is not labeled: the imported labels are not counted twice
    full = make_split("mnist5k", Y, split_seed=0, n_val=40, labeled_idx=idx)
    assert sorted(full.val.tolist()) == sorted(set(range(60)) - set(idx.tolist())) and len(full.unlabeled) == 0
    with pytest.raises(DataError, match="exceed the 60 training images"):
        make_split("mnist5k", Y, split_seed=0, n_val=41, labeled_idx=idx)
    narrow = make_split("mnist5k", Y, split_seed=0, n_val=30, labeled_idx=idx.astype(np.int32))  # a saved int32 file
    assert narrow.labeled.dtype == narrow.unlabeled.dtype == np.int64 and narrow.hash == s.hash


def test_a_fully_labeled_split_labels_all_but_the_validation_set():
    s = make_split("mnist5k", Y, split_seed=1, n_val=12, fully_labeled=True)
    assert len(s.val) == 12 and len(s.unlabeled) == 0
    assert sorted(s.labeled.tolist() + s.val.tolist()) == list(range(60))
    assert s.labeled.dtype == s.val.dtype == s.unlabeled.dtype == np.int64


def test_the_size_check_counts_the_labeled_budget():
    assert len(make_split("mnist5k", Y, split_seed=0, n_val=0, n_labeled=60).labeled) == 60  # 60 of 60: allowed
    with pytest.raises(DataError, match=r"^data\.n_val \+ data\.n_labeled = 70 exceed the 60 training images$"):
        make_split("mnist5k", Y, split_seed=0, n_val=10, n_labeled=60)


def test_split_for_uses_the_configs_labeled_index_file(tmp_path):
    from ssat.config import from_dict
    from ssat.datasets import split_for
    from ssat.presets import preset
    idx = np.arange(0, 4000, 40)  # 100 images, not a balanced draw: only an imported file gives this set
    np.save(tmp_path / "idx.npy", idx)
    _, split = split_for(from_dict(preset("mnist5k-ssat-mbi"), {"data.labeled_idx_file": str(tmp_path / "idx.npy")}))
    assert split.labeled.tolist() == idx.tolist() and not set(split.val) & set(idx.tolist())


def test_data_errors_name_the_field_the_choices_and_the_fix(tmp_path):
    from ssat.datasets import check_root, load_arrays
    with pytest.raises(DataError) as e:
        load_arrays("imagenet", None)
    assert str(e.value) == "data.dataset: 'imagenet'; allowed: mnist5k, cifar10, cifar100, svhn"
    with pytest.raises(DataError) as e:
        check_root("cifar10", str(tmp_path))
    assert str(e.value).endswith(f"Fetch it with `python -m ssat.datasets --download cifar10 --data-root {tmp_path}` "
                                 "(torchvision's downloader) or copy the files there.")


def test_a_class_short_of_its_labels_is_named_with_what_it_has():
    y = np.array([0] * 3 + [1] * 57)  # class 0 has 3 images for the 5 labels each class needs
    with pytest.raises(DataError) as err:
        make_split("mnist5k", np.where(y == 1, np.arange(60) % 9 + 1, 0), split_seed=0, n_val=0, n_labeled=50)
    assert str(err.value) == "data.n_labeled: class 0 has only 3 images left for 5 labels"


def test_indices_out_of_range_suggest_a_file_of_another_dataset():
    with pytest.raises(DataError) as err:
        make_split("mnist5k", Y, split_seed=0, n_val=0, labeled_idx=np.array([0, 60]))
    assert str(err.value) == ("data.labeled_idx_file: indices must lie in [0, 60); got 0..60 "
                              "(a file of another dataset?)")


@pytest.mark.parametrize("dataset, calls", [
    ("cifar10", [("CIFAR10", {"train": True}), ("CIFAR10", {"train": False})]),
    ("cifar100", [("CIFAR100", {"train": True}), ("CIFAR100", {"train": False})]),
    ("svhn", [("SVHN", {"split": "train"}), ("SVHN", {"split": "test"})]),
])
def test_download_fetches_the_training_and_test_parts_into_the_root(monkeypatch, tmp_path, dataset, calls):
    """torchvision's downloaders need the internet, which tests do not have: recorders stand in for them, so what is
    checked is which downloader gets which root and part (the downloaders themselves are torchvision's)."""
    import torchvision

    from ssat import datasets

    got = []
    for name in ("CIFAR10", "CIFAR100", "SVHN"):
        monkeypatch.setattr(torchvision.datasets, name,
                            lambda root, _name=name, **kw: got.append((_name, root, kw)))
    datasets.download(dataset, str(tmp_path))
    assert got == [(name, str(tmp_path), {**part, "download": True}) for name, part in calls]


def test_download_of_a_shipped_dataset_says_there_is_nothing_to_fetch(tmp_path):
    from ssat import datasets

    with pytest.raises(DataError) as err:
        datasets.download("mnist5k", str(tmp_path))
    assert str(err.value) == "mnist5k ships with the package; nothing to download"
