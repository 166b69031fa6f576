"""sweeps/subset_autoattack.py on a real MLflow store: which runs are attacked (finished trials of the seeds asked
for, a reused trial as the run it names, each once, none that has the result), and the results written into those
runs as their own final evaluation would (the step of their last epoch, tagged firstN), the same in one process
and in worker processes, and a rerun attacking nothing."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from ssat.config import from_dict
from devtools.servers import sqlite_store
from ssat.models import create_model
from ssat.presets import preset
from ssat.storage import save_verified
from sweeps.subset_autoattack import Target, _config, run_autoattack, targets

IMAGES = 4


class Store:
    def __init__(self, tmp: Path):
        self.tmp, self.uri = tmp, sqlite_store(tmp)
        self.client = MlflowClient(self.uri)
        self.exp: dict[str, str] = {}

    def experiment(self, name: str) -> str:
        if name not in self.exp:
            self.exp[name] = self.client.create_experiment(name, artifact_location=(self.tmp / "mlartifacts").as_uri())
        return self.exp[name]

    def trial(self, sweep: str, name: str, seed: int, status: str = "FINISHED", metrics: dict | None = None,
              kind: str = "trial", **tags) -> str:
        run = self.client.create_run(self.experiment(sweep), run_name=name, tags={
            "ssat.kind": kind, "ssat.seed": str(seed), "ssat.key": f"{sweep}/{name}", "ssat.sweep": sweep, **tags})
        for k, v in {"time/epochs": 2, **(metrics or {})}.items():
            self.client.log_metric(run.info.run_id, k, v, step=2)
        self.client.set_terminated(run.info.run_id, status)
        return run.info.run_id

    def with_checkpoint(self, run_id: str) -> str:
        """A cnn-small best.pt (random weights, the Trainer's format, with its checksum file) and config.json."""
        cfg = from_dict(preset("mnist5k-ssat-mbi"), {"eval.batch_size": 100})
        torch.manual_seed(0)
        model = create_model("cnn-small", 10, 1)
        folder = self.tmp / run_id / "checkpoints"
        folder.mkdir(parents=True)
        save_verified({"model": model.state_dict(), "config": cfg.to_dict(), "kind": "best", "epoch": 2,
                       "metrics": {}, "split_hash": "0" * 16, "model_name": "cnn-small"}, folder / "best.pt")
        self.client.log_artifacts(run_id, str(folder), "checkpoints")
        (self.tmp / run_id / "config.json").write_text(json.dumps(cfg.to_dict()))
        self.client.log_artifact(run_id, str(self.tmp / run_id / "config.json"))
        return run_id


def test_the_targets_are_finished_trials_of_the_seeds_each_once_a_reused_one_as_the_run_it_names(tmp_path):
    s = Store(tmp_path)
    a0 = s.trial("a", "A s0", 0)
    s.trial("a", "A s1 done", 1, metrics={"test/best/autoattack": 50.0})  # has the result: skipped
    s.trial("a", "A s2", 2)                                                # not a seed asked for
    s.trial("a", "A s0 running", 0, status="RUNNING")
    s.trial("a", "A s0 failed", 0, status="FAILED")
    s.trial("a", "parent", 0, kind="sweep")
    no_epochs = s.client.create_run(s.experiment("a"), run_name="no epochs", tags={
        "ssat.kind": "trial", "ssat.seed": "1", "ssat.key": "a/none", "ssat.sweep": "a"})
    s.client.set_terminated(no_epochs.info.run_id, "FINISHED")  # nothing recorded: no step to write at
    s.trial("b", "B s0 (reuses A s0)", 0, **{"ssat.reuses": a0})
    b1 = s.trial("b", "B s1", 1, metrics={"time/epochs": 7})
    assert targets(s.client, "a", (0, 1)) == [Target(a0, "a", "a/A s0", "A s0", 0, 2)]
    assert set(targets(s.client, "b", (0, 1))) == {Target(a0, "a", "a/A s0", "A s0", 0, 2),
                                                   Target(b1, "b", "b/B s1", "B s1", 1, 7)}
    assert targets(s.client, "b", (1,)) == [Target(b1, "b", "b/B s1", "B s1", 1, 7)]
    assert targets(s.client, "no such sweep", (0, 1)) == []


def test_a_run_without_a_seed_is_no_target_and_one_without_its_sweep_tag_belongs_to_its_experiment(tmp_path):
    s = Store(tmp_path)
    for name, drop in (("no seed", "ssat.seed"), ("no sweep", "ssat.sweep")):
        run = s.client.create_run(s.experiment("a"), run_name=name, tags={
            "ssat.kind": "trial", "ssat.seed": "1", "ssat.key": f"a/{name}", "ssat.sweep": "elsewhere"})
        s.client.delete_tag(run.info.run_id, drop)
        s.client.log_metric(run.info.run_id, "time/epochs", 3, step=3)
        s.client.set_terminated(run.info.run_id, "FINISHED")
        if drop == "ssat.sweep":
            kept = run.info.run_id
    for seeds in ((1,), (-1, 0, 1, 2), tuple(range(-2, 3))):
        assert targets(s.client, "a", seeds) == [Target(kept, "a", "a/no sweep", "no sweep", 1, 3)]


def test_a_targets_config_is_its_own_with_autoattack_on_the_first_n_images(tmp_path):
    s = Store(tmp_path)
    run = s.with_checkpoint(s.trial("a", "A s0", 0))
    cfg = _config(s.client, run, 13, str(tmp_path / "dl"))
    assert cfg.eval.autoattack_n == 13 and cfg.eval.batch_size == 100
    assert cfg.to_dict() == from_dict(preset("mnist5k-ssat-mbi"), {"eval.batch_size": 100,
                                                                  "eval.autoattack_n": 13}).to_dict()


@pytest.mark.parametrize("workers", [1, 2])
def test_every_target_gets_its_result_at_its_last_epoch_once(tmp_path, workers, monkeypatch):
    """One worker: the attacks run here, on every core; more: in spawned processes, which import this module anew
    (a forked one would inherit the attack watched here, which writes down its process and threads)."""
    import sweeps.subset_autoattack as subset

    seen = tmp_path / "attacked-here"
    real = subset.attack

    def attack(client, target, images, log=print, n_threads=None):
        with seen.open("a") as f:
            f.write(f"{os.getpid()} {n_threads}\n")
        return real(client, target, images, log=log, n_threads=n_threads)

    monkeypatch.setattr(subset, "attack", attack)
    s = Store(tmp_path)
    a0 = s.with_checkpoint(s.trial("a", "A s0", 0))
    b1 = s.with_checkpoint(s.trial("b", "B s1", 1, metrics={"time/epochs": 7}))
    s.trial("b", "B s0", 0, **{"ssat.reuses": a0})
    lines: list[str] = []
    assert run_autoattack(s.uri, ["a", "b"], (0, 1), IMAGES, log=lines.append, workers=workers) == 2
    assert lines[0] == (f"[autoattack] 2 run(s) without AutoAttack: seeds 0, 1, best checkpoint, the first {IMAGES} "
                        f"test images, {workers} at a time")
    results = {}
    for run_id, step in ((a0, 2), (b1, 7)):
        run = s.client.get_run(run_id)
        history = s.client.get_metric_history(run_id, "test/best/autoattack")
        assert [m.step for m in history] == [step]
        protocol = json.loads(run.data.tags["protocol/best/autoattack"])
        assert (protocol["subset"], protocol["n"], protocol["eps"]) == (f"first{IMAGES}", IMAGES, 0.3)
        results[run.info.run_name] = history[0].value
        assert any(ln.startswith(f"  {run.info.run_name}: ") for ln in lines)  # the attack's own lines, named
    done = [ln for ln in lines if ln.startswith("[autoattack] ") and "%" in ln]
    assert len(done) == 2 and done[0].endswith("left)") and done[1].endswith("(2/2)")
    assert {n: f"{v:.2f}%" in "".join(done) for n, v in results.items()} == {"A s0": True, "B s1": True}
    assert (seen.read_text().splitlines() if seen.exists() else []) == (
        [f"{os.getpid()} None"] * 2 if workers == 1 else [])
    again: list[str] = []
    assert run_autoattack(s.uri, ["a", "b"], (0, 1), IMAGES, log=again.append, workers=workers) == 0
    assert again == ["[autoattack] 0 run(s) without AutoAttack: seeds 0, 1, best checkpoint, the first 4 test images"]
    assert len(s.client.get_metric_history(a0, "test/best/autoattack")) == 1


def test_each_result_is_written_into_its_run_and_the_time_left_is_the_mean_so_far_times_the_runs_left(
        tmp_path, monkeypatch):
    """The attacks stood in for (their results made up; the real ones run above): what run_autoattack does with
    each result, read back from the real store, and its progress by a clock that says 10, 20 and 30 s per run."""
    from types import SimpleNamespace

    import sweeps.subset_autoattack as subset
    from sweeps.tracking.tracker import Tracker

    s = Store(tmp_path)
    for i in range(3):
        s.trial("a", f"A{i}", 0, metrics={"time/epochs": 4})
    clock = iter([100.0, 110.0, 130.0, 160.0])
    monkeypatch.setattr(subset, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    order, asked, flushed = [], [], []
    monkeypatch.delenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", raising=False)
    monkeypatch.setenv("SSAT_TRACKING_FLUSH_S", "7.5")
    real_flush = Tracker.flush
    monkeypatch.setattr(Tracker, "flush", lambda self, timeout: flushed.append(timeout) or real_flush(self, timeout))

    def results(uri, todo, images, workers):
        asked.append(workers)
        for i, t in enumerate(todo, 1):
            order.append(t)
            yield t, {"test/best/autoattack": 10.0 * i}, {"protocol/best/autoattack": f'{{"n": {images}}}'}, [" x "]

    monkeypatch.setattr(subset, "_results", results)
    lines = []
    assert run_autoattack(s.uri, ["a"], (0,), IMAGES, log=lines.append, workers=1) == 3
    assert asked == [1] and flushed == [7.5] * 3
    assert os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == "false"  # no download bars between the lines
    names = [t.name for t in order]
    assert [ln for ln in lines if ln.startswith("[autoattack] A")] == [
        f"[autoattack] {names[0]}: 10.00% (1/3, about 20 s left)",   # 10 s so far, 10 s a run, 2 runs left
        f"[autoattack] {names[1]}: 20.00% (2/3, about 15 s left)",   # 30 s so far, 15 s a run, 1 run left
        f"[autoattack] {names[2]}: 30.00% (3/3)"]
    assert [ln for ln in lines if ln.startswith("  ")] == [f"  {n}: x" for n in names]
    for i, t in enumerate(order, 1):
        assert [(m.step, m.value) for m in s.client.get_metric_history(t.run_id, "test/best/autoattack")] == [
            (4, 10.0 * i)]
        assert s.client.get_run(t.run_id).data.tags["protocol/best/autoattack"] == f'{{"n": {IMAGES}}}'
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "true")  # the user's own setting is kept
    monkeypatch.delenv("SSAT_TRACKING_FLUSH_S")
    monkeypatch.setattr(subset, "time", SimpleNamespace(perf_counter=lambda: 0.0))
    for workers, expect, new_runs in ((None, min(os.cpu_count(), 2), ("A3", "A4")), (5, 2, ("A5", "A6"))):
        for name in new_runs:  # never more workers than runs; none asked for: one a core
            s.trial("a", name, 0)
        asked.clear(), lines.clear(), flushed.clear()
        assert run_autoattack(s.uri, ["a"], (0,), IMAGES, log=lines.append, workers=workers) == 2
        assert asked == [expect] and lines[0].endswith(f", {expect} at a time") and flushed == [60.0] * 2
        assert os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == "true"
    s.trial("a", "A7", 0), s.trial("a", "A7b", 0)
    with monkeypatch.context() as m:  # a machine that cannot tell its cores: one at a time
        m.setattr(os, "cpu_count", lambda: None)
        asked.clear(), lines.clear()
        assert run_autoattack(s.uri, ["a"], (0,), IMAGES, log=lines.append) == 2 and asked == [1]
    s.trial("a", "A8", 0)
    from sweeps.tracking.run_store import RunStore

    def down(self, op):
        raise ConnectionError("store down")

    monkeypatch.setattr(RunStore, "apply", down)  # the store goes away after the targets were read
    monkeypatch.setenv("SSAT_TRACKING_FLUSH_S", "0")
    lines.clear()
    with pytest.raises(RuntimeError) as e:
        run_autoattack(s.uri, ["a"], (0,), IMAGES, log=lines.append, workers=1)
    assert str(e.value) == f"the AutoAttack result of A8 could not be written to {s.uri}"
    assert f"[tracking] {s.uri} unavailable (ConnectionError: store down); 1 operation(s) kept and retried; " \
           "training goes on" in lines  # the tracker's own lines are the command's


@pytest.mark.parametrize("n_threads", [1, None])
def test_one_checkpoint_is_attacked_in_channels_last_on_the_threads_asked_for_with_its_own_eps_and_fold_bn(
        tmp_path, monkeypatch, n_threads):
    """The real attack, watched from inside: what ssat.evaluate.evaluate_model is handed and the torch threads it
    runs on (None: every core); the batch size and image count are the caller's config's, eps and fold_bn the
    checkpoint's."""
    import ssat.evaluate
    from sweeps.subset_autoattack import autoattack_checkpoint

    s = Store(tmp_path)
    run = s.with_checkpoint(s.trial("a", "A s0", 0))
    seen = {}
    real = ssat.evaluate.evaluate_model

    def evaluate_model(model, x, y, **kw):
        seen.update(kw, threads=torch.get_num_threads(), n=len(x),
                    model_cl=all(p.is_contiguous(memory_format=torch.channels_last) for p in model.parameters()
                                 if p.dim() == 4),
                    x_cl=x.is_contiguous(memory_format=torch.channels_last))
        return real(model, x, y, **kw)

    monkeypatch.setattr(ssat.evaluate, "evaluate_model", evaluate_model)
    cfg = from_dict(preset("mnist5k-ssat-mbi"), {"eval.batch_size": 3, "eval.autoattack_n": IMAGES, "attack.eps": 0.1,
                                                 "system.fold_bn": "off"})
    before = torch.get_num_threads()
    lines = []
    metrics, tags = autoattack_checkpoint(tmp_path / run / "checkpoints" / "best.pt", "best", cfg, lines.append,
                                          n_threads=n_threads)
    assert torch.get_num_threads() == before
    log = seen.pop("log")
    assert seen == {"eps": 0.3, "checkpoint": "best", "pgd_steps": (), "autoattack": True, "batch_size": 3,
                    "subset": f"first{IMAGES}", "fold_bn": "auto", "threads": n_threads or os.cpu_count(),
                    "n": IMAGES, "model_cl": True, "x_cl": True}
    assert log == lines.append and lines
    assert set(metrics) >= {"test/best/autoattack"} and json.loads(tags["protocol/best/autoattack"])["n"] == IMAGES


def test_a_target_is_attacked_on_its_downloaded_best_checkpoint_in_a_folder_removed_afterwards(tmp_path,
                                                                                                monkeypatch):
    import sweeps.subset_autoattack as subset

    s = Store(tmp_path)
    run = s.with_checkpoint(s.trial("a", "A s0", 0))
    calls = []

    def autoattack_checkpoint(checkpoint_file, ckpt, cfg, log, n_threads=None):
        calls.append((Path(checkpoint_file), ckpt, cfg.eval.autoattack_n, log, n_threads,
                      Path(checkpoint_file).read_bytes(), sorted(p.name for p in Path(checkpoint_file).parent.parent
                                                                 .iterdir())))
        return {"test/best/autoattack": 1.0}, {}

    monkeypatch.setattr(subset, "autoattack_checkpoint", autoattack_checkpoint)
    target = targets(s.client, "a", (0,))[0]
    assert subset.attack(s.client, target, 9, log=print, n_threads=3) == ({"test/best/autoattack": 1.0}, {})
    (path, ckpt, n, log, n_threads, data, folder), = calls
    assert (path.name, path.parent.name, ckpt, n, log, n_threads) == ("best.pt", "checkpoints", "best", 9, print, 3)
    assert path.parent.parent.name.startswith("ssat-aa-") and folder == ["checkpoints", "config.json"]
    assert data == (tmp_path / run / "checkpoints" / "best.pt").read_bytes()
    assert not path.parent.parent.exists()
    # in a worker: one thread unless told, the attack's lines collected
    monkeypatch.setattr(subset, "attack", lambda client, t, images, log, n_threads: (
        log(f"{client.tracking_uri} {t.name} {images}"), ({"m": n_threads}, {"t": "x"}))[1])
    assert subset._attack_in_worker(s.uri, target, 5) == ({"m": 1}, {"t": "x"}, [f"{s.uri} A s0 5"])
    assert subset._attack_in_worker(s.uri, target, 5, n_threads=None)[0] == {"m": None}


def test_a_targets_config_lands_in_the_folder_given(tmp_path):
    s = Store(tmp_path)
    run = s.with_checkpoint(s.trial("a", "A s0", 0))
    _config(s.client, run, 13, str(tmp_path / "dl"))
    assert (tmp_path / "dl" / "config.json").read_text() == (tmp_path / run / "config.json").read_text()
