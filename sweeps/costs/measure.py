"""One figure of `python -m sweeps calibrate`, measured in a process of its own (`python -m sweeps.costs.measure JOB`).

The process talks to the calibration on its standard streams, one JSON object a line on stdout (its log on
stderr): it builds what it times and warms it up (compile, cuDNN autotuning, graph capture), says
`{"event": "ready", ...}`, waits for a line on stdin (the GPU is then idle but for it), times, and says
`{"event": "result", "records": [...]}`. A job with "compile_only" stops after the warm-up: it compiled the
step, published its kernels to the sweep's compile cache (ssat/compile_cache.py) and reports its peak GPU memory.

Jobs (JSON; "config" is a trial's resolved config, ssat.config.Config.to_dict()):
- training: the real Trainer on synthetic images of the dataset's shape (ssat/synthetic.py; MNIST-5k is shipped),
  random teacher outputs (their quality does not change the cost), the trial's step engine (system.*), its own
  batch sizes. After a schedule change the engine runs GRAPH_WARMUP eager steps and captures a new CUDA graph,
  as a trial does when eps_max, rho or lr move, so one such episode is timed, then `steps` steady steps; the
  epoch is the episode plus the rest of its steps at the steady rate.
- teacher: `steps` FixMatch steps (ssat.fixmatch.TeacherSteps.step, what train_teacher repeats) after `warmup`.
- eval: per attack, passes per second on `n` images of the dataset's shape with a model of the trial's
  architecture, fp32 (TF32 as eval.tf32 says): the clean forward, the SWA BN pass (train-mode forwards,
  ssat.swa.recompute_bn's pass), a PGD iteration (ssat.evaluate.pgd_accuracy's attack) and each AutoAttack attack
  at a reduced budget on a stand-in that every image withstands (`RobustStandIn`: the same network's compute,
  its decision pinned), so each attack runs its whole budget on every image, as on the images a robust model
  keeps; the record says what was timed and scales it to the attack's standard budget.
"""
from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn

from ssat.config import from_dict
from ssat.datasets import DATASET_INFO, split_for
from ssat.models import create_model
from ssat.pseudo_labels import TeacherOutputs
from ssat.runtime import resolve_device

# Each AutoAttack attack's forward(-backward) passes per image at the standard version's budget (pyautoattack
# 0.2.0, Linf: APGD-CE 100 iterations x 1 restart; APGD-T and FAB-T 100 iterations x 9 target classes; Square
# 5,000 queries), and the reduced budget timed here: (iterations, targets) or queries.
AA_STANDARD = {"apgd-ce": (100, 1), "apgd-t": (100, 9), "fab-t": (100, 9), "square": (5000, 1)}
AA_TIMED = {"apgd-ce": (10, 1), "apgd-t": (10, 1), "fab-t": (10, 1), "square": (100, 1)}
PGD_TIMED = (2, 6)  # PGD iterations timed: the cost of one more iteration is the difference over 4
SWA_CHUNK = 500  # images per forward of the SWA BN pass (ssat.train.Trainer._bn_images)
# The images a CIFAR-10 epoch goes through, per batching (the union of labeled and unlabeled images; AWR: the
# unlabeled ones): what an epoch figure (`cifar10_epoch_s`) is the time of.
CIFAR10_EPOCH = {"union": 49_000, "awr": 45_000}


def emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn) -> float:
    """Seconds `fn()` takes, the device synchronised before and after."""
    sync(device)
    t = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t


def peak_mib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_reserved(device) / 2 ** 20 if device.type == "cuda" else None


# ---- synthetic data of the trial's shape ----------------------------------------------------------------
def data_sizes(cfg: dict, steps: int) -> dict:
    """data.* for a training job: a small labeled set (a whole number of images per class and of labeled batches: a
    cycled labeled set's last batch is short), 100 validation images, and enough other images for `steps` + a
    warm-up's full batches."""
    c = from_dict(cfg)
    per_step = c.batching.step_images(c)
    labeled = math.lcm(c.optim.labeled_batch, DATASET_INFO[c.data.dataset].classes)
    return {"n_labeled": labeled, "n_val": 100, "n_unlabeled": (steps + 8) * per_step,
            "n_train": 100 + labeled + (steps + 8) * per_step}


def synthetic_root(dataset: str, n_train: int, folder: Path) -> str | None:
    """A folder with synthetic files of `dataset` holding n_train training images (None: MNIST-5k, shipped)."""
    from ssat.synthetic import WRITERS

    if dataset not in WRITERS:
        return None
    root = folder / f"{dataset}-{n_train}"
    marker = root / ".written"
    if not marker.exists():
        WRITERS[dataset](root, n_train=n_train, n_test=10)
        marker.write_text("")
    return str(root)


def random_teacher(cfg) -> TeacherOutputs:
    """Random logits on the split's unlabeled images and random weights of the teacher's architecture."""
    _, split = split_for(cfg)
    info = DATASET_INFO[cfg.data.dataset]
    name = cfg.teacher.model or cfg.model.name
    g = torch.Generator().manual_seed(0)
    return TeacherOutputs(torch.randn(len(split.unlabeled), info.classes, generator=g) * 3, split.hash, name,
                          create_model(name, info.classes, info.channels).state_dict())


# ---- training --------------------------------------------------------------------------------------------
def training_config(job: dict, folder: Path):
    d = job["config"]
    sizes = data_sizes(d, job["steps"])
    data = {"root": synthetic_root(d["data"]["dataset"], sizes["n_train"], folder) or d["data"]["root"],
            "n_labeled": sizes["n_labeled"], "n_val": sizes["n_val"], "n_unlabeled": sizes["n_unlabeled"],
            "labeled_idx_file": None, "pseudo_labels": None}
    return from_dict(d, {**{f"data.{k}": v for k, v in data.items()}, "eval.val_every": 10 ** 6,
                         "optim.swa_start": None, "optim.swa_bn": "recompute", "system.device": job["device"],
                         "system.compile_cache": job.get("compile_cache")})


def engine_mode(engine) -> str:
    """What the step engine ran: "graph+compile", "graph", "compile" or "eager", + "+fused" with fused forwards
    (the names of sweeps.costs.model.engine_mode's forecast)."""
    graphed = engine.graph_status == "captured"
    return {(True, True): "graph+compile", (True, False): "graph", (False, True): "compile"}.get(
        (graphed, engine.compile != "off"), "eager") + ("+fused" if engine.fused_status == "on" else "")


class TrainingJob:
    def __init__(self, job: dict, folder: Path):
        from ssat.engine import GRAPH_WARMUP, StepStats
        from ssat.schedules import at_epoch
        from ssat.train import Trainer

        self.job, cfg = job, training_config(job, folder)
        self.tr = Trainer(cfg, folder / "trainer", teacher=random_teacher(cfg), log=lambda s: print(s, file=sys.stderr))
        self.episode = GRAPH_WARMUP + 1  # eager warm-up steps and the capture's replay after a schedule change
        self.sched = at_epoch(cfg, cfg.optim.epochs)
        self.acc = StepStats(self.tr.device, cfg.method.K)
        self.batches = self._full_batches()

    def _full_batches(self) -> list:
        sizes, out = self.tr.engine.sizes, []
        for b in self.tr.batches.epoch(self.tr.gen):
            if tuple(len(t) for t in b) == sizes:
                out.append(b)
        need = self.job["steps"] + self.episode
        if len(out) < need:
            raise RuntimeError(f"{len(out)} full batches for {need} steps")
        return out

    def _run(self, batches, sched) -> float:
        eng = self.tr.engine
        return timed(self.tr.device, lambda: [eng.step(b, sched, self.acc) for b in batches])

    def warm_up(self) -> dict:
        """Compile, capture and a few replays; the compiled kernels published to the sweep's cache."""
        self.tr.engine.begin_epoch()
        self._run(self.batches[:self.episode + 2], self.sched)
        self.tr.engine.end_epoch()  # publishes the compile cache (the first process of its key)
        return {"peak_mib": peak_mib(self.tr.device), "compile_cache": self.tr.engine.status()["compile_cache"]}

    def measure(self) -> list[dict]:
        cfg, eng, steps = self.tr.cfg, self.tr.engine, self.job["steps"]
        moved = {**self.sched, "eps_max": self.sched["eps_max"] * (1 - 1e-6)}  # a new schedule: a new capture
        episode_s = self._run(self.batches[:self.episode], moved)
        step_s = self._run(self.batches[self.episode: self.episode + steps], moved) / steps
        per_step = cfg.batching.step_images(cfg)
        epoch_steps = CIFAR10_EPOCH[cfg.batching.name] / per_step
        epoch_s = episode_s + max(epoch_steps - self.episode, 0) * step_s
        return [{"bench": "trainer", "trainer_model": cfg.model.name, "method": cfg.method.name,
                 "mode": engine_mode(eng), "precision": eng.precision, "compile": eng.compile,
                 "graph_mode": eng.graph_status, "fused_forward": eng.fused_status,
                 "compile_cache": eng.status()["compile_cache"], "batch": per_step, "steps_timed": steps,
                 "step_ms": 1e3 * step_s, "schedule_change_s": episode_s, "epoch_steps": epoch_steps,
                 "cifar10_epoch_s": epoch_s, "peak_mib": peak_mib(self.tr.device),
                 "epoch_model": f"one schedule change ({self.episode} steps: {self.episode - 1} eager warm-up, "
                                f"capture) + {epoch_steps - self.episode:.0f} steps at the steady rate"}]


# ---- the FixMatch teacher ----------------------------------------------------------------------------------
class TeacherJob:
    def __init__(self, job: dict, folder: Path):
        from ssat.fixmatch import TeacherSteps

        d, steps = job["config"], job["steps"] + job["warmup"]
        dataset, t = d["data"]["dataset"], d["teacher"]
        classes = DATASET_INFO[dataset].classes
        labeled = -(-max(t["labeled_batch"], classes) // classes) * classes
        n_train = 100 + labeled + 2 * t["unlabeled_batch"]
        data = {"root": synthetic_root(dataset, n_train, folder) or d["data"]["root"], "n_labeled": labeled,
                "n_val": 100, "n_unlabeled": None, "labeled_idx_file": None, "pseudo_labels": None}
        cfg = from_dict(d, {**{f"data.{k}": v for k, v in data.items()}, "teacher.steps": steps,
                            "system.device": job["device"]})
        arrays, split = split_for(cfg)
        self.job, self.loop = job, TeacherSteps(cfg, arrays, split, resolve_device(job["device"]))

    def warm_up(self) -> dict:
        for s in range(1, self.job["warmup"] + 1):
            self.loop.step(s)
        sync(self.loop.device)
        return {"peak_mib": peak_mib(self.loop.device)}

    def measure(self) -> list[dict]:
        w, n, loop = self.job["warmup"], self.job["steps"], self.loop
        secs = timed(loop.device, lambda: [loop.step(s) for s in range(w + 1, w + n + 1)])
        views = timed(loop.device, lambda: [loop.views() for _ in range(n)])
        return [{"bench": "teacher", "teacher_model": loop.name, "precision": loop.precision, "steps": n,
                 "warmup": w, "steps_per_s": n / secs, "augment_ms_per_step": 1e3 * views / n,
                 "compile": loop.compile, "channels_last": loop.channels_last,
                 "labeled_batch": loop.t.labeled_batch, "unlabeled_batch": loop.t.unlabeled_batch}]


# ---- evaluation -----------------------------------------------------------------------------------------------
class RobustStandIn(nn.Module):
    """The network's logits scaled down under a large margin for class 0: every image is classified 0 and stays so
    inside any eps-ball, so each attack runs its whole budget on every image, while each pass costs the network's
    own forward (and backward). Labels: all 0."""

    def __init__(self, net: nn.Module, num_classes: int):
        super().__init__()
        self.net = net
        self.register_buffer("margin", torch.zeros(num_classes))
        self.margin[0] = 100.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) * 1e-3 + self.margin


def aa_attack(model: nn.Module, name: str, eps: float, budget: tuple[int, int], device: torch.device):
    """pyautoattack's object for one attack of the standard version, at (iterations or queries, targets)."""
    from pyautoattack.autopgd_base import APGDAttack, APGDAttack_targeted
    from pyautoattack.fab_pt import FABAttack_PT
    from pyautoattack.square import SquareAttack

    it, targets = budget
    if name == "apgd-ce":
        return APGDAttack(model, n_restarts=1, n_iter=it, eps=eps, norm="Linf", loss="ce", seed=0, device=device)
    if name == "apgd-t":
        return APGDAttack_targeted(model, n_restarts=1, n_iter=it, eps=eps, norm="Linf", seed=0, device=device,
                                   n_target_classes=targets)
    if name == "fab-t":
        return FABAttack_PT(model, n_restarts=1, n_iter=it, eps=eps, norm="Linf", seed=0, targeted=True,
                            n_target_classes=targets, device=device)
    return SquareAttack(model, p_init=0.8, n_queries=it, eps=eps, norm="Linf", n_restarts=1, seed=0, device=device)


def aa_passes(name: str, budget: tuple[int, int]) -> int:
    """Forward(-backward) passes per image of an attack at (iterations or queries, targets)."""
    return budget[0] * budget[1]


class EvalJob:
    def __init__(self, job: dict, folder: Path):
        cfg = from_dict(job["config"], {"system.device": job["device"]})
        info = DATASET_INFO[cfg.data.dataset]
        self.job, self.cfg, self.device = job, cfg, resolve_device(job["device"])
        torch.manual_seed(0)
        self.net = create_model(cfg.model.name, info.classes, info.channels).to(self.device).eval()
        self.net.to(memory_format=torch.channels_last)  # as the trial's evaluation runs it (Engine.channels_last)
        n, size = job["n"], info.size
        self.x = torch.rand(n, info.channels, size, size, device=self.device)
        self.y = torch.randint(0, info.classes, (n,), device=self.device)
        self.stand_in = RobustStandIn(self.net, info.classes).to(self.device).eval()

    def warm_up(self) -> dict:
        from ssat.evaluate import fp32_precision

        with fp32_precision(self.cfg.eval.tf32):
            self._pgd(1)
            with torch.no_grad():
                self.net(self.x[:self.cfg.eval.batch_size])
        sync(self.device)
        return {"peak_mib": peak_mib(self.device)}

    def _pgd(self, steps: int) -> float:
        from ssat.evaluate import pgd_accuracy

        eps, b = self.cfg.eps, self.cfg.eval.batch_size
        return timed(self.device, lambda: pgd_accuracy(self.net, self.x, self.y, eps=eps, steps=steps, batch_size=b))

    def _clean(self) -> float:
        b = self.cfg.eval.batch_size
        with torch.no_grad():
            return timed(self.device, lambda: [self.net(self.x[i: i + b]) for i in range(0, len(self.x), b)])

    def _swa_bn(self) -> float:
        from ssat.swa import recompute_bn

        chunks = [self.x[i: i + SWA_CHUNK].contiguous(memory_format=torch.channels_last)
                  for i in range(0, len(self.x), SWA_CHUNK)]
        return timed(self.device, lambda: recompute_bn(self.net, chunks))

    def _aa(self, name: str) -> tuple[float, int]:
        budget = AA_TIMED[name]
        attack = aa_attack(self.stand_in, name, self.cfg.eps, budget, self.device)
        x, y = self.x[: self.job["aa_n"]].contiguous(), torch.zeros(self.job["aa_n"], dtype=torch.long,
                                                                     device=self.device)
        return timed(self.device, lambda: attack.perturb(x, y)), len(x)

    def measure(self) -> list[dict]:
        from ssat.evaluate import fp32_precision

        cfg, out = self.cfg, []
        base = {"bench": "eval", "eval_model": cfg.model.name, "tf32": bool(cfg.eval.tf32),
                "batch": cfg.eval.batch_size}
        with fp32_precision(cfg.eval.tf32):
            n = len(self.x)
            clean = self._clean() / n
            lo, hi = PGD_TIMED
            start, per_iter, how = pgd_rate(self._pgd(lo), self._pgd(hi), lo, hi, n)
            for attack in self.job["attacks"]:
                rec = {**base, "attack": attack}
                if attack == "clean":
                    rec.update(n=n, seconds=clean * n, s_per_1000=1000 * clean, passes_per_s=1 / clean)
                elif attack == "swa-bn":
                    s = self._swa_bn() / n
                    rec.update(n=n, seconds=s * n, s_per_1000=1000 * s, passes_per_s=1 / s)
                elif attack.startswith("pgd"):
                    k = int(attack[3:])
                    rec.update(n=n, s_per_1000=1000 * (start + k * per_iter), passes_per_s=1 / per_iter,
                               timed=how.format(k=k))
                else:
                    secs, m = self._aa(attack)
                    timed_p, std_p = aa_passes(attack, AA_TIMED[attack]), aa_passes(attack, AA_STANDARD[attack])
                    rec.update(n=m, seconds=secs, passes_per_s=m * timed_p / secs,
                               s_per_1000=1000 * secs / m * std_p / timed_p, points="robust",
                               timed=f"{timed_p} passes per image on {m} images a stand-in keeps robust, scaled to "
                                     f"the standard version's {std_p}")
                out.append(rec)
        return out


def pgd_rate(t_lo: float, t_hi: float, lo: int, hi: int, n: int) -> tuple[float, float, str]:
    """(seconds per image outside the iterations, seconds per image per iteration, how: a template of {k}) from
    PGD-lo and PGD-hi timed on n images: an iteration costs the difference over hi - lo, and the rest of PGD-lo is
    the random start, the final forward and the bookkeeping. Where the difference is not positive (timing noise of
    a busy machine or a tiny model swamped it), PGD-hi's whole time is spread over its iterations: an upper bound."""
    if t_hi > t_lo:
        per_iter = (t_hi - t_lo) / (hi - lo) / n
        return (max(t_lo / n - lo * per_iter, 0.0), per_iter,
                f"PGD-{lo} and PGD-{hi} on {n} images; {{k}} iterations at the difference's rate "
                f"+ the rest of PGD-{lo}")
    return 0.0, t_hi / hi / n, (f"PGD-{hi} on {n} images, its time spread over its {hi} iterations (PGD-{lo} took "
                                f"as long: no difference to time); {{k}} iterations at that rate, an upper bound")


JOBS = {"training": TrainingJob, "teacher": TeacherJob, "eval": EvalJob}


def run_here(job: dict) -> list[dict]:
    """One job built, warmed up and timed in this process, without main's protocol and process: the dry run's
    figures of CPU trials (sweeps.costs.wall_time)."""
    with tempfile.TemporaryDirectory(prefix="ssat-measure-") as tmp:
        work = JOBS[job["kind"]](job, Path(tmp))
        work.warm_up()
        return work.measure()


def main(argv: list[str] | None = None) -> int:
    job = json.loads((argv or sys.argv[1:])[0])
    device = resolve_device(job["device"])
    with tempfile.TemporaryDirectory(prefix="ssat-measure-") as tmp:
        try:
            work = JOBS[job["kind"]](job, Path(tmp))
            info = work.warm_up()
            emit("ready", **info)
            if job.get("compile_only"):
                return 0
            if not sys.stdin.readline():  # the calibration ended before this figure's turn
                return 1
            records = work.measure()
        except Exception as exc:  # noqa: BLE001 - one figure's failure is reported, the others go on
            emit("error", error=f"{type(exc).__name__}: {str(exc)[:500]}")
            raise
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    emit("result", records=[{**r, "device": gpu, "torch": torch.__version__} for r in records])
    return 0


if __name__ == "__main__":
    sys.exit(main())
