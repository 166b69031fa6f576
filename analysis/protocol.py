"""Which test results may share a table cell: the evaluation protocol a paper table asks for.

A result enters a cell only when its protocol record (the ``protocol/<ckpt>/<attack>`` tag, see
docs/tracking.md) matches the table's: attack and its number of steps, eps, PGD step, restarts,
number of images (the full test set), checkpoint kind and precision. Everything else is left out of the
cell and listed, with the reason, in the table's provenance.

Defaults follow the paper: eps 8/255 on CIFAR/SVHN (0.3 on MNIST, taken from the run's ``dataset``
param), L-inf, PGD step eps/10 with one restart, fp32, the ``best`` checkpoint (``teacher`` for the
FixMatch row), the standard AutoAttack.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass

TEST_SET_SIZE = {"cifar10": 10000, "cifar100": 10000, "svhn": 26032}
CHECKPOINTS = ("best", "last")  # a trial's test/<ckpt>/* (the teacher run's is 'teacher')
_PGD = re.compile(r"^pgd(\d+)$")
CLEAN_NAMES = ("clean", "none", None)  # a clean-accuracy record may name no attack


@dataclass(frozen=True)
class Protocol:
    """What a paper table's cells require of a result (one per rendered table)."""

    checkpoint: str = "best"
    precision: str = "fp32"
    step_ratio: float = 0.1          # PGD step = eps * step_ratio
    restarts: int = 1
    norm: str = "Linf"
    autoattack_version: str = "standard"
    allow_subset: bool = False       # admit results on a test subset (labelled in the table)

    def as_dict(self) -> dict:
        return asdict(self)


def dataset_eps(dataset: str | None) -> float:
    """The paper-table eps for a dataset: 0.3 for MNIST variants, 8/255 otherwise."""
    return 0.3 if str(dataset or "").lower().startswith("mnist") else 8 / 255


def parse_record(text) -> dict | None:
    """The JSON text of a protocol tag -> dict (None when absent or unreadable)."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        rec = json.loads(text)
    except json.JSONDecodeError:
        return None
    return rec if isinstance(rec, dict) else None


def _close(a, b) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-12)
    except (TypeError, ValueError):
        return False


def expected_fields(attack: str, dataset: str | None, checkpoint: str, proto: Protocol) -> dict:
    """Field -> required value of a record of `attack` on `dataset` (floats compared with rel tol 1e-6)."""
    want = {"attack": attack, "checkpoint": checkpoint, "precision": proto.precision}
    if attack == "clean":
        return want
    eps = dataset_eps(dataset)
    want.update(eps=eps, norm=proto.norm)
    pgd = _PGD.match(attack)
    if pgd:
        want.update(steps=int(pgd.group(1)), step=eps * proto.step_ratio, restarts=proto.restarts)
    return want


def mismatch(record: dict | None, attack: str, dataset: str | None, checkpoint: str,
             proto: Protocol) -> str | None:
    """Why a result does not belong in a cell of this protocol, or None when it does."""
    if record is None:
        return "no protocol record"
    for key, want in expected_fields(attack, dataset, checkpoint, proto).items():
        got = record.get(key)
        if key == "attack" and attack == "clean" and got in CLEAN_NAMES:
            continue
        same = _close(got, want) if isinstance(want, float) else got == want
        if not same:
            return f"protocol {key}={got!r}, table needs {want!r}"
    return _images_mismatch(record, dataset, proto) or _autoattack_mismatch(record, attack, proto)


def _images_mismatch(record: dict, dataset: str | None, proto: Protocol) -> str | None:
    subset = record.get("subset")
    if subset != "full":
        return None if proto.allow_subset else (f"protocol subset={subset!r} (n={record.get('n')}), "
                                                f"table needs the full test set")
    n = TEST_SET_SIZE.get(str(dataset or "").lower())
    if n is not None and record.get("n") != n:
        return f"protocol n={record.get('n')!r}, the full {dataset} test set has {n} images"
    return None


def _autoattack_mismatch(record: dict, attack: str, proto: Protocol) -> str | None:
    if attack != "autoattack":
        return None
    version = (record.get("autoattack") or {}).get("version")
    if version != proto.autoattack_version:
        return f"protocol autoattack version={version!r}, table needs {proto.autoattack_version!r}"
    return None


def is_subset(record: dict | None) -> bool:
    """True for a result computed on part of the test set (admitted only with allow_subset)."""
    return record is not None and record.get("subset") != "full"
