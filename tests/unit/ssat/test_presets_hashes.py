"""The config_hash of every preset, pinned: it keys tracked runs, trial folders and resume (state.pt refuses
another hash), so a refactor of the config (a field, a default, the registries) that changed it would orphan
every run tracked so far. The literals were computed before the method and schedule registries existed.
A new preset needs no entry here; a changed hash of an existing one is a new experiment and must be deliberate
(the six non-MNIST AWR presets changed on purpose when they took the authors' choices: presets.AWR_AUTHORS; the four
presets with beta 1 and interpolation when x_pgd's weightless forward went: method.pgd_forward; mnist5k-standard
when its best checkpoint came to be chosen by clean accuracy: eval.select_by)."""
import pytest

from ssat.config import from_dict
from ssat.presets import PRESETS, preset

PINNED = {
    "cifar10-rst": "78233ce62dc7",
    "cifar10-srst-awr": "f0ce916eaaff",  # issue 15: the authors' AWR choices (was 627a517573bc)
    "cifar10-ssat-mbi": "6ac76e1fee2a",
    "cifar10-ssat-mbi-awr": "b5b37039eada",  # issue 15: the authors' AWR choices (was 7f75e96b48f6)
    "cifar10-trades-ours-resnet18": "a366ae3017bc",  # issue 25: x_pgd unforwarded at beta 1 (was 2a94910623e3)
    "cifar10-trades-ours-wrn-28-5": "43beb958dc14",  # issue 25: x_pgd unforwarded at beta 1 (was 427348d7be73)
    "cifar10-trades-resnet18": "81f34f1e15a5",
    "cifar10-trades-wrn-28-5": "3cc023a3769b",
    "cifar10-uat++": "536391d4a03d",
    "cifar100-rst": "6076d6d13a9d",
    "cifar100-srst-awr": "15e597d6b8fa",  # issue 15: the authors' AWR choices (was 50033d863efd)
    "cifar100-ssat-mbi": "2022ceab4285",  # issue 25: x_pgd unforwarded at beta 1 (was c875b0b1b2e1)
    "cifar100-ssat-mbi-awr": "6e297e6ff344",  # issue 25: x_pgd unforwarded at beta 1 (was 833ae4549766)
    "cifar100-uat++": "75e328ead0c2",
    "mnist5k-rst": "345ddecad97f",
    "mnist5k-srst-awr": "bf02d4cd5c5d",
    "mnist5k-ssat-mbi": "17d46df81f4a",
    "mnist5k-ssat-mbi-awr": "673476a50887",
    "mnist5k-standard": "3e18dfe7d282",  # its best checkpoint by validation clean accuracy (was 2e49feee4e65)
    "mnist5k-trades": "fcc48d701be4",
    "mnist5k-uat++": "6f8e6873e97e",
    "svhn-rst": "fce20806abd5",
    "svhn-srst-awr": "b0a047926be7",  # issue 15: the authors' AWR choices (was 78fd59bcbaf3)
    "svhn-ssat-mbi": "13fe713eb0bb",
    "svhn-ssat-mbi-awr": "a6b785360cd2",  # issue 15: the authors' AWR choices (was 2eecb1d3b57a)
    "svhn-uat++": "f69b6c8206e8",
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_preset_config_hash_is_unchanged(name):
    assert name in PRESETS, f"preset {name!r} is gone"
    assert from_dict(preset(name)).config_hash() == PINNED[name]


def test_the_hash_leaves_the_seed_out_unless_asked():
    from ssat.config_hash import config_hash

    a, b = from_dict(preset("mnist5k-ssat-mbi"), {"seed": 0}), from_dict(preset("mnist5k-ssat-mbi"), {"seed": 1})
    assert config_hash(a) == config_hash(b) == a.config_hash()
    assert config_hash(a, exclude_seed=False) != config_hash(b, exclude_seed=False)
