"""What a sweep's GPU time goes to, measured on the project's own code (sections of benchmarks/device_run.sh).

    python benchmarks/sweep_cost.py epoch --method ssat-mbi --model wrn-28-5 --images 49000 --epochs 2 \\
        --data-root DIR --cache DIR [--out DIR] [--step-times 200]
    python benchmarks/sweep_cost.py eval --checkpoint DIR/last.pt --data-root DIR --n 1000 --batches 500 1000

`epoch` trains the real Trainer on synthetic CIFAR-10 files (ssat/synthetic.py, class-dependent patterns a model
learns) in the default performance mode (system.compile and graph_mode auto, unless given), as a sweep's trial
does: 4,000 labeled images and the rest pseudo-labeled by a random teacher (its quality does not change the cost),
the batching of the method's preset, validation left out (`eval` measures it). It prints the seconds of each epoch
and, from the first `--step-times` steps (each synchronised), when the process reached full speed: the end of the
first step within 25% of the median of the last ten, counted from the script's start (before torch is imported),
which is what a trial pays before it trains at full speed, compile or cache load included.

`eval` times the evaluation of a checkpoint on the first `--n` test images at each batch size, in strict fp32 and
in TF32: clean, PGD-10/20/40 (ssat.evaluate's attack) and APGD-CE, then standard AutoAttack on `--aa-n` images
with each of its attacks timed; the robust accuracy of each, so the TF32 choice can be checked against fp32.

Every record is a JSON line in the format sweeps/costs/model.py reads. A CPU run is a smoke test, never a measurement.
"""
from __future__ import annotations

import time

T0 = time.perf_counter()  # before torch is imported: a trial process pays its imports too

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ssat.config import from_dict  # noqa: E402
from ssat.epoch_scaling import scale_epochs  # noqa: E402
from ssat.evaluate import (autoattack_accuracy, first_test_images, fp32_precision,  # noqa: E402
                           load_checkpoint_model, pgd_accuracy)
from ssat.presets import preset  # noqa: E402
from ssat.train import Trainer  # noqa: E402
from ssat.synthetic import write_cifar10  # noqa: E402
from sweeps.costs.measure import CIFAR10_EPOCH, engine_mode, random_teacher  # noqa: E402



def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def synthetic_cifar10(root: Path, n_train: int, n_test: int) -> Path:
    """Synthetic CIFAR-10 files in `root` (written once; a marker names their sizes)."""
    marker = root / f".written-{n_train}-{n_test}"
    if not marker.exists():
        write_cifar10(root, n_train=n_train, n_test=n_test)
        marker.write_text("")
    return root


def epoch_config(args, root: Path):
    """The method's CIFAR-10 preset at --epochs (schedules scaled), on `args.images` training images per epoch."""
    d = preset(f"cifar10-{args.method}")
    d["optim"].update(lr_milestones=[], lr_factors=[])  # a constant rate: the cost of an epoch does not depend on it
    d = scale_epochs(d, args.epochs)
    over = {"data.root": str(root), "data.n_val": args.n_val, "data.n_labeled": args.n_labeled,
            "model.name": args.model, "eval.val_every": 10 ** 6, "optim.swa_start": None,
            "system.device": args.device, "system.compile": args.compile, "system.graph_mode": args.graph_mode,
            "system.compile_cache": args.cache}
    if args.precision:
        over["system.precision"] = args.precision
    return from_dict(d, over)


def first_full_speed(ends: list[float]) -> float | None:
    """The end (seconds since start) of the first step within 25% of the median of the last ten step times."""
    steps = [b - a for a, b in zip(ends, ends[1:])]
    if len(steps) < 12:
        return None
    fast = statistics.median(steps[-10:]) * 1.25
    return next(ends[i + 1] for i, s in enumerate(steps) if s <= fast)


def cmd_epoch(args) -> dict:
    root = synthetic_cifar10(Path(args.data_root), args.images + args.n_val, args.test_n)
    cfg = epoch_config(args, root)
    out = Path(args.out or tempfile.mkdtemp(prefix="ssat-cost-"))
    lines = []
    tr = Trainer(cfg, out, teacher=random_teacher(cfg), log=lines.append)
    ends, step = [], tr.engine.step

    def timed(batch, sched, acc, poison=False):
        step(batch, sched, acc, poison)
        if len(ends) < args.step_times:
            sync(tr.device)
            ends.append(time.perf_counter() - T0)

    tr.engine.step = timed
    hist = tr.fit()
    m = hist[-1]
    per_epoch = CIFAR10_EPOCH[cfg.batching.name]
    ips = m["perf/images_per_s"]
    unit_ips = len(tr.batches) / m["perf/epoch_seconds"]  # the images an epoch goes through once (AWR: unlabeled)
    r = {"bench": "trainer", "trainer_model": args.model, "method": args.method, "mode": engine_mode(tr.engine),
         "precision": tr.engine.precision, "compile": tr.engine.compile, "graph_mode": tr.engine.graph_status,
         "fused_forward": tr.engine.fused_status, "compile_cache": tr.engine.status()["compile_cache"],
         "images": len(tr.batches),
         "epochs_s": [round(h["perf/epoch_seconds"], 3) for h in hist], "epoch_s": m["perf/epoch_seconds"],
         # the last epoch's time, when an epoch before it took the compile, capture and warm-up
         "images_per_s": ips, "cifar10_epoch_s": per_epoch / unit_ips if len(hist) > 1 else None,
         "first_step_s": ends[0] if ends else None, "first_full_speed_s": first_full_speed(ends),
         "step_ms_median": 1e3 * statistics.median(b - a for a, b in zip(ends, ends[1:])) if len(ends) > 2 else None,
         "train_loss": m["train/loss"], "graph_steps": m.get("perf/graph_steps")}
    print(json.dumps(r), flush=True)
    return r


def _timed(device, fn):
    sync(device)
    t = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t


def eval_records(model, x, y, eps: float, batch: int, tf32: bool, name: str, attacks: list[str]) -> list[dict]:
    """Seconds and robust accuracy of each attack on (x, y) at this batch size and TF32 setting."""
    from pyautoattack import AutoAttack

    out = []

    def rec(attack, acc, secs):
        out.append({"bench": "eval", "eval_model": name, "attack": attack, "batch": batch, "n": len(x),
                    "seconds": secs, "s_per_1000": 1000 * secs / len(x), "tf32": tf32, "robust_acc": acc})
        print(json.dumps(out[-1]), flush=True)

    with fp32_precision(tf32):
        for attack in attacks:
            if attack == "clean":
                def clean():
                    with torch.no_grad():
                        return sum((model(x[i: i + batch]).argmax(1) == y[i: i + batch]).sum().item()
                                   for i in range(0, len(x), batch))
                correct, secs = _timed(x.device, clean)
                rec(attack, 100.0 * correct / len(x), secs)
            elif attack.startswith("pgd"):
                (acc, _), secs = _timed(x.device, lambda: pgd_accuracy(model, x, y, eps=eps, steps=int(attack[3:]),
                                                                     batch_size=batch))
                rec(attack, acc, secs)
            elif attack == "apgd-ce":
                aa = AutoAttack(model, norm="Linf", eps=eps, version="custom", attacks=["apgd-ce"], device=x.device,
                                seed=0)
                aa.apgd.n_restarts = 1
                x_adv, secs = _timed(x.device, lambda: aa.run_standard_evaluation(x, y, batch_size=batch)[0])
                with torch.no_grad():
                    acc = 100.0 * (model(x_adv).argmax(1) == y).float().mean().item()
                rec(attack, acc, secs)
    return out


def cmd_eval(args) -> list[dict]:
    device = torch.device(args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    model, cfg, _ = load_checkpoint_model(args.checkpoint, device)
    model = model.to(memory_format=torch.channels_last).eval()
    x, y, _ = first_test_images(cfg, args.n, device, args.data_root)
    x = x.contiguous(memory_format=torch.channels_last)
    out = []
    for batch in args.batches:
        for tf32 in args.tf32:
            out += eval_records(model, x, y, cfg.eps, batch, tf32, cfg.model.name, args.attacks)
    if args.aa_n:
        xa, ya = x[:args.aa_n], y[:args.aa_n]
        with fp32_precision(args.aa_tf32):
            (acc, after, seconds), total = _timed(device, lambda: autoattack_accuracy(
                model, xa, ya, eps=cfg.eps, batch_size=args.batches[0], log=lambda s: print(s, file=sys.stderr)))
        for attack, secs in {**seconds, "autoattack": total}.items():
            r = {"bench": "eval", "eval_model": cfg.model.name, "attack": attack, "batch": args.batches[0],
                 "n": len(xa), "seconds": secs, "s_per_1000": 1000 * secs / len(xa), "tf32": args.aa_tf32,
                 "robust_acc": acc if attack == "autoattack" else after.get(attack)}
            print(json.dumps(r), flush=True)
            out.append(r)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("epoch")
    e.add_argument("--method", default="ssat-mbi", choices=["ssat-mbi", "ssat-mbi-awr", "rst", "srst-awr", "uat++"])
    e.add_argument("--model", default="wrn-28-5")
    e.add_argument("--images", type=int, default=49_000, help="training images per epoch (labeled + unlabeled)")
    e.add_argument("--n-labeled", type=int, default=4000)
    e.add_argument("--n-val", type=int, default=1000)
    e.add_argument("--test-n", type=int, default=1000, help="test images written (for `eval`)")
    e.add_argument("--epochs", type=int, default=2)
    e.add_argument("--precision", default=None, help="system.precision (default: the preset's)")
    e.add_argument("--compile", default="auto")
    e.add_argument("--graph-mode", default="auto")
    e.add_argument("--cache", default=None, help="system.compile_cache: the shared folder of compiled kernels")
    e.add_argument("--data-root", required=True)
    e.add_argument("--out", default=None, help="the trainer's folder (last.pt for `eval`)")
    e.add_argument("--step-times", type=int, default=200)
    e.add_argument("--device", default="auto")
    v = sub.add_parser("eval")
    v.add_argument("--checkpoint", required=True)
    v.add_argument("--data-root", required=True)
    v.add_argument("--n", type=int, default=1000)
    v.add_argument("--batches", type=int, nargs="+", default=[500, 1000])
    v.add_argument("--tf32", type=lambda s: s == "on", nargs="+", default=[False, True], help="off, on or both")
    v.add_argument("--attacks", nargs="+", default=["clean", "pgd10", "pgd20", "pgd40", "apgd-ce"])
    v.add_argument("--aa-n", type=int, default=200, help="images for standard AutoAttack (0: none)")
    v.add_argument("--aa-tf32", action="store_true")
    v.add_argument("--device", default="auto")
    args = ap.parse_args(argv)
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (not a GPU figure)"
    print(json.dumps({"device": dev, "torch": torch.__version__, "cuda": torch.version.cuda}), flush=True)
    {"epoch": cmd_epoch, "eval": cmd_eval}[args.cmd](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
