"""`python -m sweeps.costs.measure`, the process behind each calibration figure, run in this process on CPU with tiny
budgets: what the slow tier's real calibration (tests/slow/test_calibrate_cpu.py) reaches only in subprocesses.
Each job speaks the calibration's protocol on stdout (ready, then a result after "go" on stdin) and its records
hold the figures the dry run reads, computed by the formulas the docstrings give."""
from __future__ import annotations

import io
import json
from argparse import Namespace
from pathlib import Path

import pytest

from ssat.config import from_dict
from sweeps.costs import calibrate as cal
from sweeps.costs import measure
from sweeps.spec import load_spec

TINY = Path(__file__).resolve().parents[4] / "tests" / "data" / "calibrate-tiny.yaml"
ARGS = Namespace(device="cpu", steps=2, teacher_warmup=1, eval_n=8, aa_n=2)


def item(kind: str, method: str | None = None) -> cal.Item:
    items = [i for i in cal.plan([load_spec(TINY)]) if i.kind == kind]
    return next(i for i in items if method is None or i.keys[0][2] == method)


def small(spec: dict) -> dict:
    """A training job of batches of 8 (AWR: 10 labeled, 8 unlabeled) and PGD-1: the job's logic at a unit test's
    cost."""
    optim = {**spec["config"]["optim"], "batch_size": 8, "labeled_batch": 10, "unlabeled_batch": 8}
    config = {**spec["config"], "optim": optim,
              "attack": {**spec["config"]["attack"], "steps": 1}}
    return {**spec, "config": config}


def run_job(monkeypatch, capsys, spec: dict, stdin: str = "go\n") -> tuple[int, list[dict]]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = measure.main([json.dumps(spec)])
    return code, [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]


def test_a_training_job_times_full_batches_and_scales_them_to_a_cifar10_epoch(tmp_path, monkeypatch, capsys):
    spec = small(cal.job(item("training", "ssat-mbi-awr"), ARGS, tmp_path / "cache"))
    code, events = run_job(monkeypatch, capsys, spec)
    assert code == 0 and [e["event"] for e in events] == ["ready", "result"]
    assert events[0]["peak_mib"] is None  # no CUDA memory on a CPU
    (rec,) = events[1]["records"]
    assert rec["bench"] == "trainer" and rec["method"] == "ssat-mbi-awr" and rec["device"] == "cpu"
    assert rec["mode"] == "eager" and rec["steps_timed"] == 2 and rec["step_ms"] > 0
    cfg = from_dict(spec["config"])
    assert rec["batch"] == cfg.batching.step_images(cfg)  # AWR: the unlabeled batch's images per step
    assert rec["epoch_steps"] == pytest.approx(measure.CIFAR10_EPOCH["awr"] / rec["batch"])
    episode = rec["epoch_model"].split("(")[1].split(" ")[0]
    steady = (rec["epoch_steps"] - int(episode)) * rec["step_ms"] / 1e3
    assert rec["cifar10_epoch_s"] == pytest.approx(rec["schedule_change_s"] + steady)


def test_a_job_whose_turn_never_comes_exits_1_and_a_compile_only_job_after_ready(tmp_path, monkeypatch, capsys):
    spec = {**cal.job(item("eval"), ARGS, tmp_path / "cache"), "attacks": ["clean"]}
    code, events = run_job(monkeypatch, capsys, spec, stdin="")  # the calibration ended: stdin closed, no "go"
    assert code == 1 and [e["event"] for e in events] == ["ready"]
    code, events = run_job(monkeypatch, capsys, {**spec, "compile_only": True}, stdin="")
    assert code == 0 and [e["event"] for e in events] == ["ready"]


def test_a_failing_job_reports_its_error_then_raises(monkeypatch, capsys):
    spec = {"kind": "training", "config": item("training", "rst").cfg.to_dict(), "device": "cpu", "steps": 10 ** 6}
    with pytest.raises(RuntimeError, match="full batches"):
        run_job(monkeypatch, capsys, spec)
    (ev,) = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert ev["event"] == "error" and ev["error"].startswith("RuntimeError: ") and "full batches for" in ev["error"]


def test_a_teacher_job_times_its_steps_after_the_warm_up(tmp_path, monkeypatch, capsys):
    teacher = item("teacher")
    code, events = run_job(monkeypatch, capsys, cal.job(teacher, ARGS, tmp_path / "cache"))
    assert code == 0
    (rec,) = events[-1]["records"]
    assert rec["bench"] == "teacher" and (rec["steps"], rec["warmup"]) == (2, 1)
    assert rec["steps_per_s"] > 0 and rec["augment_ms_per_step"] > 0 and rec["compile"] == "off"
    t = teacher.cfg.teacher
    assert (rec["labeled_batch"], rec["unlabeled_batch"]) == (t.labeled_batch, t.unlabeled_batch)


def test_an_eval_job_gives_each_attack_its_rate_per_1000_images(tmp_path, monkeypatch, capsys):
    ev = item("eval")
    spec = {**cal.job(ev, ARGS, tmp_path / "cache"), "attacks": ["clean", "pgd10", "swa-bn", "square"]}
    code, events = run_job(monkeypatch, capsys, spec)
    assert code == 0
    recs = {r["attack"]: r for r in events[-1]["records"]}
    assert list(recs) == ["clean", "pgd10", "swa-bn", "square"]  # the job's order
    assert all(r["bench"] == "eval" and r["batch"] == ev.cfg.eval.batch_size for r in recs.values())
    for name in ("clean", "swa-bn"):  # timed on all n images: per image and per 1,000 agree
        r = recs[name]
        assert r["n"] == 8 and r["s_per_1000"] == pytest.approx(1000 * r["seconds"] / 8)
        assert r["passes_per_s"] == pytest.approx(8 / r["seconds"])
    assert recs["pgd10"]["timed"].startswith(("PGD-2 and PGD-6 on 8 images; 10 iterations", "PGD-6 on 8 images"))
    sq = recs["square"]
    assert sq["n"] == 2 and sq["points"] == "robust"
    timed_p, std_p = measure.AA_TIMED["square"][0], measure.AA_STANDARD["square"][0]
    assert sq["passes_per_s"] == pytest.approx(2 * timed_p / sq["seconds"])
    assert sq["s_per_1000"] == pytest.approx(1000 * sq["seconds"] / 2 * std_p / timed_p)  # scaled to 5,000 queries


def test_the_synthetic_data_of_a_figure_is_written_once(tmp_path):
    assert measure.synthetic_root("mnist5k", 50, tmp_path) is None  # shipped: nothing to write
    root = Path(measure.synthetic_root("cifar10", 30, tmp_path))
    assert root == tmp_path / "cifar10-30" and (root / ".written").exists()
    stamp = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    assert measure.synthetic_root("cifar10", 30, tmp_path) == str(root)
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()} == stamp


def test_a_pgd_k_figure_is_the_time_of_the_passes_pgd_k_makes(monkeypatch, tmp_path):
    """Calibrate times PGD-2 and PGD-6 and prices PGD-k from them. On a clock where each image's forward pass costs
    1 ms (a gradient step's backward rides with its forward), PGD-k makes k gradient passes and one final forward
    per image (its random start is noise, no pass): its figure must be (k + 1) ms an image, the same as timing PGD-k
    itself; the clean figure one pass."""
    from ssat.evaluate import pgd_accuracy

    spec = {**cal.job(item("eval"), ARGS, tmp_path / "cache"), "attacks": ["clean", "pgd10", "pgd20", "pgd40"]}
    job = measure.EvalJob(spec, tmp_path)
    seen = []
    job.net.register_forward_hook(lambda module, inputs, output: seen.append(len(inputs[0])))

    def pass_clock(device, fn):
        seen.clear()
        fn()
        return sum(seen) * 1e-3

    monkeypatch.setattr(measure, "timed", pass_clock)
    recs = {r["attack"]: r for r in job.measure()}
    n, eps, b = len(job.x), job.cfg.eps, job.cfg.eval.batch_size
    assert recs["clean"]["s_per_1000"] == pytest.approx(1.0)
    for k in (10, 20, 40):
        direct = pass_clock(None, lambda: pgd_accuracy(job.net, job.x, job.y, eps=eps, steps=k, batch_size=b))
        assert recs[f"pgd{k}"]["s_per_1000"] == pytest.approx(1000 * direct / n) == pytest.approx(k + 1.0), k
        assert recs[f"pgd{k}"]["passes_per_s"] == pytest.approx(1000.0)  # one iteration: 1 ms an image
