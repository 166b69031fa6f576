"""End to end on MNIST-5k with 100 labels: the FixMatch teacher's pseudo-labels against a supervised-only model.

The supervised-only model is written here independently of ssat.teacher: the same architecture (cnn-small),
the same number of SGD steps with the same optimiser, cosine schedule, labeled batch and weak augmentation
(crop), cross-entropy on the 100 labels only, and the same validation-based checkpoint selection.
"""
import math
import os
import time
import warnings

import pytest
import torch
import torch.nn.functional as F

from ssat.config import from_dict
from ssat.augment import augment
from ssat.datasets import split_for, to_float
from ssat.models import create_model
from ssat.presets import preset, teacher_preset
from ssat.teacher import ensure_teacher, resolve_teacher

pytestmark = pytest.mark.integration

MARGIN = 5.0          # percentage points the teacher's pseudo-labels must beat supervised-only by
TIME_LIMIT = 120.0    # seconds of teacher training on a 2-core CPU


def supervised_only(cfg, arrays, split) -> tuple[float, float]:
    """(accuracy % on split.unlabeled, training seconds) of CE on the labeled images alone."""
    t = cfg.teacher
    if cfg.system.threads:
        torch.set_num_threads(cfg.system.threads)
    torch.manual_seed(t.seed)
    gen = torch.Generator().manual_seed(t.seed)
    model = create_model(t.model or cfg.model.name, 10, 1)
    opt = torch.optim.SGD(model.parameters(), lr=t.lr, momentum=t.momentum, nesterov=t.nesterov,
                          weight_decay=t.weight_decay)
    xl, yl = arrays.x_train[split.labeled], arrays.y_train[split.labeled]
    xv, yv = to_float(arrays.x_train[split.val]), arrays.y_train[split.val]
    best, state = -1.0, None
    t0 = time.perf_counter()
    for step in range(t.steps):
        for g in opt.param_groups:
            g["lr"] = t.lr * 0.5 * (1 + math.cos(math.pi * step / t.steps))
        b = torch.randperm(len(xl), generator=gen)[: t.labeled_batch]
        model.train()
        loss = F.cross_entropy(model(augment(to_float(xl[b]), gen, flip=False)), yl[b])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (step + 1) % t.eval_every == 0 or step + 1 == t.steps:
            model.eval()
            with torch.no_grad():
                acc = (model(xv).argmax(1) == yv).float().mean().item()
            if acc > best:
                best, state = acc, {k: v.clone() for k, v in model.state_dict().items()}
    seconds = time.perf_counter() - t0
    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        xu, yu = to_float(arrays.x_train[split.unlabeled]), arrays.y_train[split.unlabeled]
        return 100.0 * (model(xu).argmax(1) == yu).float().mean().item(), seconds


def test_mnist5k_teacher_beats_supervised_only(tmp_path, teacher_dir):
    d = preset("mnist5k-ssat-mbi")
    d.setdefault("teacher", teacher_preset("mnist5k"))
    # the session's teacher cache: the end-to-end method test trains this split's teacher once for both
    cfg = from_dict(d, {"data.teacher_dir": str(teacher_dir), "eval.autoattack": False,
                        "eval.pgd_steps": [10], "system.threads": 1})
    arrays, split = split_for(cfg)
    assert len(split.labeled) == 100 and cfg.model.name == "cnn-small" and cfg.teacher.model is None

    load_before = os.getloadavg()[0]
    path = ensure_teacher(cfg, log=print).path
    load_after = os.getloadavg()[0]
    out = resolve_teacher(cfg, arrays, split, log=print)  # found in the cache: no second training
    p = out.provenance
    assert out.provenance["key"] == path.parent.name.rsplit("-", 1)[1]
    sup_acc, sup_seconds = supervised_only(cfg, arrays, split)
    print(f"\nMNIST-5k, 100 labels, {len(split.unlabeled)} unlabeled images, {cfg.teacher.steps} steps:\n"
          f"  FixMatch teacher pseudo-label acc {p['pseudo_label_acc']:.2f}% (val {p['val_acc']:.2f}%, "
          f"step {p['selected_step']}), training {p['train_seconds']:.1f}s wall, {p['train_cpu_seconds']:.1f}s CPU "
          f"(load average {load_before:.1f} before, {load_after:.1f} after)\n"
          f"  supervised-only (same model and steps) acc {sup_acc:.2f}%, training {sup_seconds:.1f}s\n"
          f"  teacher test: " + ", ".join(f"{a} {v:.2f}%" for a, v in p["test_metrics"].items()))
    assert p["pseudo_label_acc"] >= sup_acc + MARGIN
    # The time limit is about this code, not about other tenants of a shared machine: when the load average
    # says the cores were oversubscribed, neither the wall clock nor the CPU time (steal, shared caches) is a
    # measure of it, and the numbers are reported instead. On 2 free cores it took 75 s (1 thread).
    if max(load_before, load_after) <= (os.cpu_count() or 1):
        assert p["train_seconds"] < TIME_LIMIT
    else:
        warnings.warn(f"machine oversubscribed (load {max(load_before, load_after):.1f} on {os.cpu_count()} "
                      f"cores): teacher training took {p['train_seconds']:.1f}s wall, "
                      f"{p['train_cpu_seconds']:.1f}s CPU; the {TIME_LIMIT:.0f}s limit was not checked")
    assert p["test_metrics"]["clean"] > 85.0 and p["test_metrics"]["pgd10"] < p["test_metrics"]["clean"]
