"""Evaluation: clean, PGD-10/20/40 and AutoAttack, always fp32 in eval mode, each with its protocol record.

PGD follows the authors' evaluation: step eps/10, one uniform random start, CE on the true labels (it
explains the paper's gap between its PGD-10 and PGD-20 columns). AutoAttack is the standard version
(APGD-CE, APGD-T, FAB-T, Square) of `pyautoattack`, at exactly the dataset's eps.

CLI: python -m ssat.evaluate CHECKPOINT [--autoattack/--no-autoattack] [--n N] [--data-root DIR] [--unverified]: the
protocol the checkpoint's trainer used (evaluate_checkpoint), progress on stderr, one JSON document on stdout.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import re
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn as nn

from .attacks import pgd
from .folding import FoldedEval, fold_plan
from .entry import entry_point, positive_int
from .runtime import eval_mode, resolve_device, threads

AA_ATTACKS = ["apgd-ce", "apgd-t", "fab-t", "square"]


class EvaluationCheckError(AssertionError):
    """An attack produced an example outside the eps-ball or outside [0, 1]."""


def protocol(attack: str, *, eps: float, n: int, subset: str, checkpoint: str, steps: int = 0,
             precision: str = "fp32", setup: dict | None = None) -> dict:
    """The record that travels with every number (docs/tracking.md). precision: "fp32" (strict IEEE) or "tf32"
    (cuDNN convolutions and matmuls in TF32 on a GPU: eval.tf32). setup: how the numbers were computed, which
    moves their last bits (`run_setup`: batch size, memory format, BatchNorm folding, threads, device)."""
    rec = {"attack": attack, "eps": eps, "norm": "Linf", "step": None, "steps": steps, "restarts": 0,
           "random_start": None, "loss": None, "n": n, "subset": subset, "precision": precision,
           "checkpoint": checkpoint, "autoattack": None, **(setup or {})}
    if attack.startswith("pgd"):
        rec.update(step=eps / 10, restarts=1, random_start="uniform", loss="ce")
    if attack == "autoattack":
        import importlib.metadata as md

        rec["autoattack"] = {"version": "standard", "attacks": AA_ATTACKS,
                             "package": f"pyautoattack {md.version('pyautoattack')}"}
    return rec


@contextlib.contextmanager
def fp32_precision(tf32: bool):
    """cuDNN convolutions and CUDA matmuls in TF32 (tf32) or strict IEEE fp32 inside the block, restored after it.
    cuDNN's own default is TF32, so an evaluation that does not say so is not strict fp32 on a GPU."""
    conv, mm = torch.backends.cudnn.conv, torch.backends.cuda.matmul
    old = conv.fp32_precision, mm.fp32_precision
    conv.fp32_precision = mm.fp32_precision = "tf32" if tf32 else "ieee"
    try:
        yield
    finally:
        conv.fp32_precision, mm.fp32_precision = old


def _predict(model, x, batch_size):
    with torch.no_grad():
        return torch.cat([model(x[i: i + batch_size]).argmax(1) for i in range(0, len(x), batch_size)])


def _check_adv(x_adv: torch.Tensor, x: torch.Tensor, eps: float, name: str) -> float:
    linf = (x_adv - x).abs().flatten(1).max(1).values.max().item() if len(x) else 0.0
    if linf > eps + 1e-6:
        raise EvaluationCheckError(f"{name}: ||delta||_inf = {linf:.6f} exceeds eps = {eps:.6f}")
    if len(x) and (x_adv.min() < 0 or x_adv.max() > 1):
        raise EvaluationCheckError(f"{name}: adversarial images leave [0, 1]")
    return linf


def pgd_accuracy(model, x, y, *, eps, steps, batch_size, seed: int = 0) -> tuple[float, float]:
    """Robust accuracy (%) under PGD-steps (step eps/10, uniform start) and the largest perturbation seen.
    The random starts come from a generator of their own seeded with `seed`: the same model gets the same
    number every time (validation compares epochs on the same attack), and evaluating draws nothing from the
    training's random stream (so how often one validates does not change the training)."""
    correct, linf = 0, 0.0
    gen = torch.Generator(device=x.device).manual_seed(seed)
    for i in range(0, len(x), batch_size):
        xb, yb = x[i: i + batch_size], y[i: i + batch_size]
        xa = pgd(model, xb, yb, eps, steps, eps / 10, loss="ce", random_start=True, init="uniform", generator=gen)
        linf = max(linf, _check_adv(xa, xb, eps, f"pgd{steps}"))
        with torch.no_grad():
            correct += (model(xa).argmax(1) == yb).sum().item()
    return 100.0 * correct / max(len(x), 1), linf


class _AutoAttackProgress(logging.Handler):
    """pyautoattack's debug records -> a progress line per attack (AutoAttack is the longest silent stage), and
    the robust accuracy after each attack (a drop at Square after the gradient attacks hints at gradient masking)."""
    AFTER = re.compile(r"robust accuracy after (\S+): ([0-9.]+)%")

    def __init__(self, log, n: int):
        super().__init__(logging.DEBUG)
        self.log, self.n, self.t0, self.after, self.started = log, n, time.perf_counter(), {}, {}

    def seconds(self, end: float) -> dict[str, float]:
        """Seconds each attack that ran took (it runs until the next one starts, the last until `end`)."""
        starts = sorted(self.started.items(), key=lambda kv: kv[1])
        ends = [t for _, t in starts[1:]] + [end]
        return {a: e - t for (a, t), e in zip(starts, ends)}

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if msg.startswith("running "):
            attack = msg.split()[1]
            self.started[attack] = time.perf_counter()
            k = AA_ATTACKS.index(attack) + 1 if attack in AA_ATTACKS else "?"
            self.log(f"    autoattack: {attack} ({k}/{len(AA_ATTACKS)}) on {self.n} images, "
                     f"{time.perf_counter() - self.t0:.0f} s so far")
        elif m := self.AFTER.match(msg):  # printed as a percent with 2 decimals: exact as a count for n <= 10,000
            self.after[m[1].lower()] = 100.0 * round(float(m[2]) * self.n / 100) / self.n


def autoattack_accuracy(model, x, y, *, eps, batch_size, seed=0, log=print) -> tuple[float, dict[str, float],
                                                                                     dict[str, float]]:
    """Robust accuracy (%) under standard AutoAttack (pyautoattack's keyword-only API), the robust accuracy (%)
    after each of its attacks in order: {"apgd-ce": .., "apgd-t": .., "fab-t": .., "square": ..}, and the seconds
    each attack that ran took (on the images still robust when it started). An attack skipped because no robust
    image was left counts the accuracy reached before it."""
    from pyautoattack import AutoAttack

    logger = logging.getLogger("auto-attack")
    level, propagate = logger.level, logger.propagate
    progress = _AutoAttackProgress(log, len(x))
    logger.setLevel(logging.DEBUG)
    logger.propagate = False  # its own lines stay out of the run's log; ours say where it is
    logger.addHandler(progress)
    try:
        adversary = AutoAttack(model, norm="Linf", eps=eps, version="standard", device=x.device, seed=seed)
        # NCHW images: pyautoattack views its gradient buffers (zeros_like the images) as (B, -1), which refuses
        # channels_last 3-channel images; with them every GPU AutoAttack with a robust image left crashed in APGD-T
        x_adv, _ = adversary.run_standard_evaluation(x.contiguous(), y, batch_size=batch_size)
        if x.device.type == "cuda":
            torch.cuda.synchronize(x.device)
        seconds = progress.seconds(time.perf_counter())
    finally:
        logger.removeHandler(progress)
        logger.setLevel(level)
        logger.propagate = propagate
    _check_adv(x_adv, x, eps, "autoattack")
    acc = 100.0 * (_predict(model, x_adv, batch_size) == y).sum().item() / max(len(y), 1)
    after, last = {}, None
    for attack in AA_ATTACKS:
        last = progress.after.get(attack, last if last is not None else acc)
        after[attack] = last
    return acc, after, seconds


def run_setup(model: nn.Module, x: torch.Tensor, batch_size: int, folded: bool) -> dict:
    """How an evaluation computes, for its protocol records: the same checkpoint evaluated with the same setup gives
    the same numbers bit for bit; another batch size, memory format, folding, thread count or device may move the
    last bits and, through PGD's sign steps, a few images. The memory format is the model's (its convolutions
    follow their weights' format; a one-channel image is both formats at once)."""
    last = any(p.dim() == 4 and not p.is_contiguous() and p.is_contiguous(memory_format=torch.channels_last)
               for p in model.parameters())
    return {"batch_size": batch_size, "memory_format": "channels_last" if last else "contiguous",
            "fold_bn": folded, "threads": torch.get_num_threads(), "device": x.device.type}


def evaluate_model(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, eps: float, checkpoint: str,
                   pgd_steps=(10, 20, 40), autoattack: bool = True, autoattack_n: int | None = None,
                   batch_size: int = 500, subset: str = "full", tf32: bool = False, fold_bn: str = "off",
                   log=print) -> dict[str, dict]:
    """Evaluate a model on (x, y): {attack: {"acc": percent, "protocol": record}}.

    x: (N, C, H, W) float in [0, 1] on the model's device; y: (N,). Always fp32 (strict, or TF32 on a GPU with
    tf32: the protocol records say which), eval mode (restored).
    Checks: every adversarial example within eps and [0, 1]; clean >= PGD-10 >= PGD-20 >= PGD-40
    (a violation is recorded and warned about: PGD-T returns its last iterate, so it can happen by chance).
    fold_bn: system.fold_bn (auto folds on a CPU): every forward with BatchNorm folded into the convolution before
    it (ssat/folding.py), the same function up to float rounding.
    """
    folded = fold_plan(fold_bn, x.device.type, "off", model)[0]
    setup = run_setup(model, x, batch_size, folded)
    if folded:
        model = FoldedEval(model)
    out = {}
    precision = "tf32" if tf32 and x.device.type == "cuda" else "fp32"
    record = functools.partial(protocol, eps=eps, n=len(x), subset=subset, checkpoint=checkpoint, precision=precision,
                               setup=setup)
    with eval_mode(model), torch.autocast(x.device.type, enabled=False), fp32_precision(tf32):
        acc = 100.0 * (_predict(model, x, batch_size) == y).float().mean().item()
        out["clean"] = {"acc": acc, "protocol": record("clean")}
        for steps in pgd_steps:
            acc, linf = pgd_accuracy(model, x, y, eps=eps, steps=steps, batch_size=batch_size)
            out[f"pgd{steps}"] = {"acc": acc, "max_linf": linf, "protocol": record(f"pgd{steps}", steps=steps)}
            log(f"  [{checkpoint}] pgd{steps}: {acc:.2f}%")
        if autoattack:
            n = len(x) if autoattack_n is None else min(autoattack_n, len(x))
            aa_subset = subset if n == len(x) else f"first{n}"
            acc, after, seconds = autoattack_accuracy(model, x[:n], y[:n], eps=eps, batch_size=batch_size, log=log)
            out["autoattack"] = {"acc": acc, "after": after, "seconds": seconds,
                                 "protocol": record("autoattack", n=n, subset=aa_subset)}
            log(f"  [{checkpoint}] autoattack ({n} images): {acc:.2f}% (after "
                + ", ".join(f"{a} {v:.2f}%" for a, v in after.items()) + ")")
    chain = [out["clean"]["acc"]] + [out[f"pgd{s}"]["acc"] for s in sorted(pgd_steps)]
    ordered = all(a >= b for a, b in zip(chain, chain[1:]))
    for rec in out.values():
        rec["checks"] = {"linf_within_eps": True, "in_unit_box": True, "ordered": ordered}
    if not ordered:
        warnings.warn(f"[{checkpoint}] accuracies not ordered clean >= PGD-10 >= PGD-20 >= PGD-40: {chain}")
    return out


def flatten_results(results: dict[str, dict[str, dict]]) -> tuple[dict[str, float], dict[str, str]]:
    """{ckpt: {attack: rec}} -> metrics {"test/best/pgd20": acc} and protocol tags {"protocol/best/pgd20": json}.
    AutoAttack's accuracy after each of its attacks goes to "test/<ckpt>/autoattack/<attack>" (same protocol)."""
    metrics, tags = {}, {}
    for ckpt, per in results.items():
        for attack, rec in per.items():
            metrics[f"test/{ckpt}/{attack}"] = rec["acc"]
            tags[f"protocol/{ckpt}/{attack}"] = json.dumps(rec["protocol"], separators=(",", ":"))
            for step, acc in rec.get("after", {}).items():
                metrics[f"test/{ckpt}/{attack}/{step}"] = acc
    return metrics, tags


def load_checkpoint_model(path: str | Path, device: str | torch.device = "cpu", *, unverified: bool = False):
    """A model from best.pt / last.pt (weights only), with the config it was trained with and the checkpoint.

    The checksum sidecar is required, unless `unverified` (a file of the user's own): then a file without
    one loads too, and ck["verified"] says which it was.
    """
    from .config import from_dict
    from .datasets import DATASET_INFO
    from .models import create_model
    from .storage import ForeignFileError, load_user_file, load_verified

    ck, verified = load_user_file(path, device) if unverified else (load_verified(path, device), True)
    if not isinstance(ck, dict) or "model" not in ck or "config" not in ck:
        raise ForeignFileError(f"{path}: not an ssat checkpoint (expected keys 'model' and 'config')")
    ck["verified"] = verified
    cfg = from_dict(ck["config"])
    classes, channels = DATASET_INFO[cfg.data.dataset][:2]
    model = create_model(cfg.model.name, classes, channels, cfg.model.dropout).to(device)
    try:
        model.load_state_dict(ck["model"])
    except RuntimeError as exc:
        raise ForeignFileError(f"{path}: weights do not fit model {cfg.model.name!r} "
                               f"({str(exc).splitlines()[0]})") from None
    return model, cfg, ck


def channels_last_of(cfg) -> bool:
    """The memory format a run's engine trains and evaluates in (ssat.engine.Engine: system.channels_last, None
    meaning on), which the command line's evaluation of its checkpoints uses too."""
    return cfg.system.channels_last is not False


def checkpoint_settings(cfg, kind: str) -> dict:
    """evaluate_model's settings for a checkpoint of `kind` ("best", "last") of a run of `cfg`, as its trainer
    evaluates it: eval's PGD steps, batch size, TF32 and AutoAttack (on eval.autoattack_checkpoints, for the seeds
    of eval.autoattack_seeds), and system.fold_bn."""
    e = cfg.eval
    aa = e.autoattack and (e.autoattack_seeds is None or cfg.seed in e.autoattack_seeds) \
        and kind in e.autoattack_checkpoints
    return {"pgd_steps": e.pgd_steps, "autoattack": aa, "autoattack_n": e.autoattack_n, "batch_size": e.batch_size,
            "tf32": e.tf32, "fold_bn": cfg.system.fold_bn}


def evaluate_checkpoint(model: nn.Module, cfg, x: torch.Tensor, y: torch.Tensor, subset: str, kind: str, *,
                        channels_last: bool, log=print, **changes) -> dict[str, dict]:
    """One checkpoint's test protocol, as the trainer runs it (checkpoint_settings, then `changes`, in the memory
    format given): the one path of the trainer's final evaluation and of `python -m ssat.evaluate`, so the same
    checkpoint gets the same numbers from both."""
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    return evaluate_model(model, x, y, eps=cfg.eps, checkpoint=kind, subset=subset, log=log,
                          **{**checkpoint_settings(cfg, kind), **changes})


def evaluate_checkpoints(cfg, out: Path, arrays, device, channels_last: bool, best_epoch: int, checkpoints=None,
                         log=print) -> dict[str, dict]:
    """A run's test protocol: evaluate_checkpoint on each checkpoint of eval.checkpoints (or `checkpoints`) found in
    `out`, on eval.test_n test images; the results and their protocol records also written to out/results.json.
    {ckpt: {attack: {"acc", "protocol"}}}."""
    e = cfg.eval
    x, y, subset = first_n_test(arrays, e.test_n, device)
    kinds = checkpoints or e.checkpoints
    aa = [k for k in kinds if checkpoint_settings(cfg, k)["autoattack"]]
    log(f"final evaluation: {'/'.join(kinds)} checkpoint on {len(x):,} test images, "
        + ", ".join(f"PGD-{s}" for s in e.pgd_steps)
        + (f", AutoAttack on {min(e.autoattack_n or len(x), len(x)):,}" if aa else ""))
    results = {}
    for kind in kinds:
        model, _, _ = load_checkpoint_model(out / f"{kind}.pt", device)
        results[kind] = evaluate_checkpoint(model, cfg, x, y, subset, kind, channels_last=channels_last, log=log)
    metrics, tags = flatten_results(results)
    (out / "results.json").write_text(json.dumps({"metrics": metrics, "protocols": tags, "best_epoch": best_epoch},
                                                 indent=1))
    return results


def first_n_test(arrays, n: int | None, device) -> tuple[torch.Tensor, torch.Tensor, str]:
    """The first n test images of `arrays` (all when n is None) as float (n, C, H, W) in [0, 1] and labels (n,)
    on `device`, with the protocol's subset name ("full" or "first<n>")."""
    from .datasets import to_float

    n = len(arrays.x_test) if n is None else min(n, len(arrays.x_test))
    subset = "full" if n == len(arrays.x_test) else f"first{n}"
    return to_float(arrays.x_test[:n]).to(device), arrays.y_test[:n].to(device), subset


def first_test_images(cfg, n: int | None, device,
                      data_root: str | None = None) -> tuple[torch.Tensor, torch.Tensor, str]:
    """first_n_test of cfg's dataset, loaded from data_root (default cfg.data.root)."""
    from .datasets import load_arrays

    return first_n_test(load_arrays(cfg.data.dataset, data_root or cfg.data.root), n, device)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m ssat.evaluate",  # pragma: no mutate
                                 description="Evaluate a checkpoint with the protocol its run's "  # pragma: no mutate
                                             "trainer used (every default is the checkpoint's "  # pragma: no mutate
                                             "config's); progress on stderr, the "  # pragma: no mutate
                                             "accuracies as one JSON document on stdout.")  # pragma: no mutate
    ap.add_argument("checkpoint")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--n", type=positive_int, default=None,
                    help="first N test images (default: eval.test_n, None meaning all)")  # pragma: no mutate
    ap.add_argument("--autoattack", action=argparse.BooleanOptionalAction, default=None,
                    help="default: as the trainer (eval.autoattack for this checkpoint and seed)")  # pragma: no mutate
    # pragma: no mutate start
    ap.add_argument("--autoattack-n", type=positive_int, default=None,
                    help="default: eval.autoattack_n")
    ap.add_argument("--batch-size", type=positive_int, default=None,
                    help="default: eval.batch_size")
    # pragma: no mutate end
    ap.add_argument("--device", default=None, help="default: system.device")  # pragma: no mutate
    ap.add_argument("--out", default=None, help="write the results as JSON here")  # pragma: no mutate
    ap.add_argument("--unverified", action="store_true",  # pragma: no mutate
                    help="load a checkpoint of your own that has no .sha256 sidecar (weights only; reported)")
    return ap


@entry_point
def main(argv=None) -> int:
    from .storage import CorruptFileError, sidecar

    args = parser().parse_args(argv)
    log = functools.partial(print, file=sys.stderr)
    try:
        model, cfg, ck = load_checkpoint_model(args.checkpoint, "cpu", unverified=args.unverified)
    except CorruptFileError as exc:
        hint = "" if args.unverified or sidecar(args.checkpoint).exists() else (
            "; a checkpoint of your own without one loads with --unverified")
        raise CorruptFileError(f"{exc}{hint}") from None
    if not ck["verified"]:
        log(f"warning: {args.checkpoint} has no checksum sidecar: loaded unverified (weights only)")
    device = resolve_device(args.device or cfg.system.device)
    changes = {k: v for k, v in (("autoattack", args.autoattack), ("autoattack_n", args.autoattack_n),
                                 ("batch_size", args.batch_size)) if v is not None}
    with threads(cfg.system.threads):  # as the trainer: its process runs with system.threads
        x, y, subset = first_test_images(cfg, cfg.eval.test_n if args.n is None else args.n, device, args.data_root)
        res = evaluate_checkpoint(model.to(device), cfg, x, y, subset, ck.get("kind", "best"),
                                  channels_last=channels_last_of(cfg), log=log, **changes)
    head = {"checkpoint": str(args.checkpoint), "verified": ck["verified"]}
    print(json.dumps({**head, **{k: {"acc": round(v["acc"], 2)} for k, v in res.items()}}))
    if args.out:
        Path(args.out).write_text(json.dumps({**head, **res}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
