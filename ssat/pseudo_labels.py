"""Teacher outputs: the soft pseudo-labels y~ = softmax(f_T(x)) of Algorithm 1, lines 1-3.

Stored as logits (not probabilities) so a temperature can be applied later without underflow, with the
split they belong to; `check_pseudo_labels` refuses a file of another split or a malformed one. The teacher
cache's files must carry their checksum; a user's file (data.pseudo_labels) may not, and is then marked
unverified (`TeacherOutputs.verified`, also in its provenance) for the run to record.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .storage import load_user_file, load_verified, save_verified


class PseudoLabelError(ValueError):
    """Pseudo-labels that do not fit the run's split."""


@dataclass
class TeacherOutputs:
    logits: torch.Tensor              # (N_unlabeled, C) in the order of split.unlabeled
    split_hash: str
    model_name: str | None = None     # set when the teacher's weights come with it (needed by AWR)
    model_state: dict | None = None
    provenance: dict = field(default_factory=dict)
    verified: bool = True             # False: a user's file without a checksum sidecar

    def probabilities(self, temperature: float = 1.0) -> torch.Tensor:
        return torch.softmax(self.logits.float() / temperature, dim=1)

    def save(self, path: str | Path) -> None:
        # Provenance goes through JSON so only plain types reach the file (weights_only loading refuses
        # objects such as torch's TorchVersion string).
        prov = json.loads(json.dumps(self.provenance, default=str))
        save_verified({"logits": self.logits, "split_hash": self.split_hash, "model_name": self.model_name,
                       "model_state": self.model_state, "provenance": prov}, path)


def load_teacher_outputs(path: str | Path, *, split_hash: str, n_unlabeled: int, num_classes: int,
                         user_file: bool = False) -> TeacherOutputs:
    """Read a teacher file and check it: the cache's (its sidecar required), or with `user_file` a user's
    `{"logits"|"probs": (N, C), "split_hash": str}` (a sidecar optional; without one it is unverified)."""
    obj, verified = load_user_file(path) if user_file else (load_verified(path), True)
    if not isinstance(obj, dict) or not ({"logits", "probs"} & set(obj)):
        raise PseudoLabelError(f"data.pseudo_labels: {path} holds no 'logits' or 'probs' tensor")
    if "logits" in obj:
        logits = obj["logits"]
    else:
        probs = obj["probs"]
        check_pseudo_labels(probs, path, n_unlabeled, num_classes, probabilities=True)
        logits = probs.clamp_min(1e-12).log()
    check_pseudo_labels(logits, path, n_unlabeled, num_classes)
    got = obj.get("split_hash")
    if got != split_hash:
        raise PseudoLabelError(f"data.pseudo_labels: {path} belongs to split {got!r}, this run's split is "
                               f"{split_hash!r} (another dataset, split_seed or labeled set)")
    prov = obj.get("provenance", {})
    if not isinstance(prov, dict):
        raise PseudoLabelError(f"data.pseudo_labels: {path}: 'provenance' must be a dict, got {type(prov).__name__}")
    prov = {**prov, "verified": verified}
    return TeacherOutputs(logits.float(), got, obj.get("model_name"), obj.get("model_state"), prov, verified)


def check_pseudo_labels(t, path, n_unlabeled: int, num_classes: int, probabilities: bool = False) -> None:
    if not isinstance(t, torch.Tensor) or t.dim() != 2:
        raise PseudoLabelError(f"data.pseudo_labels: {path}: expected a 2-D tensor (N, C), got "
                               f"{getattr(t, 'shape', type(t).__name__)}")
    if tuple(t.shape) != (n_unlabeled, num_classes):
        raise PseudoLabelError(f"data.pseudo_labels: {path}: shape {tuple(t.shape)}, expected "
                               f"({n_unlabeled}, {num_classes}) = (unlabeled images of this split, classes)")
    if not torch.isfinite(t).all():
        raise PseudoLabelError(f"data.pseudo_labels: {path}: holds NaN or infinite values")
    if probabilities:
        sums = t.sum(1)
        if (t < 0).any() or not torch.allclose(sums, torch.ones_like(sums), atol=1e-3):
            raise PseudoLabelError(f"data.pseudo_labels: {path}: rows must be probabilities summing to 1 "
                                   f"(found sums {sums.min():.4f}..{sums.max():.4f})")
