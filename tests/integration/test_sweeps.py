"""Sweeps on a real local Ray cluster (one fake logical GPU): fractional sharing, actor reuse without leaks,
faults survived with nothing lost, search + confirm."""
import json
from pathlib import Path

import pytest

from sweeps.cli import main as sweeps_main
from devtools.sweep_helpers import (check_study_mirrors_the_store, epoch_histories, history,
                                            trial_runs, write_spec)

pytestmark = pytest.mark.integration


def _run(args):
    return sweeps_main(args)


def _intervals(workdir: Path, name: str, phase: str = "grid") -> list[tuple[float, float, str]]:
    """(start, end, trial dir) of every trial from Ray's own result files."""
    out = []
    for rfile in (workdir / "runs" / "sweeps" / name / "tune" / phase).glob("*/result.json"):
        lines = [json.loads(x) for x in rfile.read_text().splitlines() if x.strip()]
        first, last = lines[0], lines[-1]
        out.append((first["timestamp"] - first["time_this_iter_s"], last["timestamp"], rfile.parent.name))
    return sorted(out)


def test_four_quarter_gpu_trials_share_one_gpu_and_a_fifth_waits(ray_local, teacher_dir, tmp_path):
    spec = write_spec(tmp_path / "s.yaml", "frac", epochs=2, seeds=range(5), max_concurrent=5,
                      resources={"cpu": 0.25, "gpu": 0.25})
    assert _run(["run", str(spec), "--workdir", str(tmp_path)]) == 0
    iv = _intervals(tmp_path, "frac")
    assert len(iv) == 5
    first4, fifth = iv[:4], iv[4]
    assert max(s for s, _, _ in first4) < min(e for _, e, _ in first4), f"the first four did not overlap: {iv}"
    assert fifth[0] >= min(e for _, e, _ in first4) - 1.0, f"the fifth started before a GPU share was free: {iv}"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs = trial_runs(uri, "frac")
    assert len(runs) == 5  # four concurrent trials on the embedded store lost nothing
    for r in runs:
        assert [s for s, _ in history(uri, r, "val/pgd10")] == [1, 2]
        assert r.data.tags["ssat.status"] == "FINISHED" and r.info.status == "FINISHED"
        assert float(r.data.tags["repro.gpu_share"]) == 0.25

    # Actor reuse: the fifth trial ran in a process an earlier trial used, yet equals a fresh run of its config.
    pids = {r.data.tags["ssat.seed"]: r.data.tags["repro.pid"] for r in runs}
    late = max(runs, key=lambda r: r.info.start_time)
    assert list(pids.values()).count(late.data.tags["repro.pid"]) >= 2, f"no actor was reused: {pids}"
    from ssat.config import from_dict
    from ssat.train import Trainer

    cfg = from_dict(json.loads((tmp_path / "runs" / "sweeps" / "frac" / "configs" / late.data.tags["ssat.key"] /
                                "config.json").read_text()))
    alone = Trainer(cfg.replace(**{"data.teacher_dir": str(teacher_dir)}), tmp_path / "alone", log=lambda s: None).fit()
    got = epoch_histories(uri, late)
    for m in alone:
        assert got["val/pgd10"][m["epoch"] - 1][1] == pytest.approx(m["val/pgd10"], abs=1e-9)
        assert got["train/loss"][m["epoch"] - 1][1] == pytest.approx(m["train/loss"], abs=1e-9)


def test_faults_are_survived_and_nothing_is_lost(ray_local, teacher_dir, tmp_path, monkeypatch, capfd):
    rows = [{"row": "lin|on", "set": {"attack.schedule": "linear", "attack.t": 2}}]
    base = write_spec(tmp_path / "base.yaml", "nofault", epochs=3, seeds=[0, 1], rows=rows)
    assert _run(["run", str(base), "--workdir", str(tmp_path)]) == 0
    faulty = write_spec(tmp_path / "f.yaml", "faults", epochs=3, seeds=[0, 1, 2], rows=rows, max_concurrent=3)
    once = tmp_path / "once"
    monkeypatch.setenv("SSAT_FAULT", "raise@2/seed=0,exit@2/seed=1,nan@2/seed=2")
    monkeypatch.setenv("SSAT_FAULT_ONCE_DIR", str(once))
    rc = _run(["run", str(faulty), "--workdir", str(tmp_path), "--max-failures", "2"])
    assert rc == 1  # the diverged trial makes the sweep incomplete, and it says so
    out = capfd.readouterr().out
    assert "sweep faults is INCOMPLETE: stage grid finished 2/3 trials. Resume with:" in out, out[-3000:]
    assert "(add --rerun-failed to re-run failed trials)" in out
    assert len(list(once.iterdir())) == 3  # all three faults fired
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ref = {r.data.tags["ssat.seed"]: r for r in trial_runs(uri, "nofault")}
    runs = {r.data.tags["ssat.seed"]: r for r in trial_runs(uri, "faults")}
    assert set(runs) == {"0", "1", "2"}
    for seed in ("0", "1"):  # a raised exception and a killed worker: resumed from the checkpoint
        r = runs[seed]
        assert r.data.tags["ssat.status"] == "FINISHED"
        got, want = epoch_histories(uri, r), epoch_histories(uri, ref[seed])
        assert [s for s, _ in got["val/pgd10"]] == [1, 2, 3]  # one value per epoch, no gap, no duplicate
        assert got == want  # equal to the uninterrupted run, metric by metric
    nan = runs["2"]
    assert nan.info.status == "FAILED" and "loss became nan or infinite at epoch 2" in nan.data.tags["ssat.status"]
    assert [s for s, _ in history(uri, nan, "val/pgd10")] == [1]


def test_search_then_confirm_reruns_exactly_the_top_k(ray_local, teacher_dir, tmp_path, capfd):
    """A search read as a user reads it: one name per trial in the console, MLflow and `status`; the study holds
    every trial with its per-epoch values and MLflow run; the ranking and the confirmed means printed are the
    store's."""
    search = {"num_samples": 4, "sampler_seed": 1,
              "space": {"method.beta": {"float": [0.0, 1.0]}, "method.tau": {"float": [0.5, 4.0]}},
              "confirm": {"top_k": 2, "seeds": [10, 11]}}
    spec = write_spec(tmp_path / "s.yaml", "srch", epochs=2, seeds=[0], search=search,
                      overrides={"attack.schedule": "const"})
    assert _run(["run", str(spec), "--workdir", str(tmp_path)]) == 0
    out = capfd.readouterr().out
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    searched = trial_runs(uri, "srch", "search")
    confirmed = trial_runs(uri, "srch", "confirm")
    assert len(searched) == 4 and len(confirmed) == 4
    check_search_said(out, tmp_path, uri, searched, confirmed)

    def sampled(r):
        return (r.data.params["method.beta"], r.data.params["method.tau"])

    score = {sampled(r): r.data.metrics["val/pgd10"] for r in searched}
    chosen = {sampled(r) for r in confirmed}
    assert len(chosen) == 2 and chosen <= set(score)
    worst_chosen = min(score[c] for c in chosen)
    assert all(v <= worst_chosen for k, v in score.items() if k not in chosen)  # nothing better was left out
    assert sorted(r.data.tags["ssat.seed"] for r in confirmed) == ["10", "10", "11", "11"]
    assert all("test/best/clean" in r.data.metrics for r in confirmed)
    assert not any("test/best/clean" in r.data.metrics for r in searched)  # search trials: validation only


def check_search_said(out: str, workdir: Path, uri: str, searched, confirmed) -> None:
    from sweeps.driver.commands import sweep_status
    from sweeps.trials.ranking import mean_std

    names = [r.info.run_name for r in searched + confirmed]
    assert len(set(names)) == 8 and all(f"] {n}: epoch 2" in out for n in names), out[-3000:]  # the console's
    status = sweep_status("srch", workdir=workdir)
    assert all(n in status for n in names)  # status lists them by the same name
    check_study_mirrors_the_store(workdir, uri, "srch")
    # the ranking printed: the store's search runs, best first by their last val/pgd10
    head = out.index("[search] the top 4 of 4 trials by val/pgd10 (max, at their last epoch):")
    printed = [ln.split(None, 2) for ln in out[head:].splitlines()[2:6]]
    store = sorted(searched, key=lambda r: (-round(r.data.metrics["val/pgd10"], 6), r.info.run_name))
    assert [(int(p[0]), float(p[1]), p[2].removesuffix("  -> confirmed")) for p in printed] == [
        (i, round(r.data.metrics["val/pgd10"], 2), r.info.run_name) for i, r in enumerate(store, 1)]
    # the confirmed means: each configuration's confirm runs in the store, over their two seeds
    head = out.index("[confirm] 2 configuration(s), each over seeds 10, 11")
    for line in out[head:].splitlines()[2:4]:
        label = line.split("  top", 1)[1].split(" ", 1)[1].strip()
        runs = [r for r in confirmed if r.data.tags["ssat.label"] == label]
        m, s = mean_std([r.data.metrics["val/pgd10"] for r in runs])
        assert len(runs) == 2 and line.split()[:3] == [f"{m:.2f}", "±", f"{s:.2f}"], line
    assert "[winner] top" in out and "python -m analysis.tables --experiment srch --table search" in out
