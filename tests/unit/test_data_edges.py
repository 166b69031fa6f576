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
