"""`python -m sweeps paper` in miniature through the real driver, Ray and MLflow store: every part's sweep (tiny
specs of the same structure as sweeps/specs/mnist5k-paper-*.yaml, 1 epoch, one seed), AutoAttack on a 10-image
subset, and the report with every table and figure kind. A trial shared between parts is trained once and appears
in every table that needs it; Ctrl+C in a part, then the command again: nothing finished is trained again."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from sweeps.cli import main as sweeps_main
from devtools.sweep_helpers import TINY_OVERRIDES

pytestmark = pytest.mark.integration

SHARED = {"attack.schedule": "curious", "attack.t": 1, "attack.gamma": 1.25, "method.interpolate": True}
AWR = {"optim.labeled_batch": 16, "optim.unlabeled_batch": 32}
PARTS = {  # file -> (name, preset, table, grid): the structure of the real parts, a trial or two each
    "mnist5k-paper-table1.yaml": ("p-table1", "mnist5k-ssat-mbi", "main", [
        {"row": "SSAT-MBI", "preset": "mnist5k-ssat-mbi", "set": SHARED},
        {"row": "RST", "preset": "mnist5k-rst"}]),
    "mnist5k-demo.yaml": ("p-table2", "mnist5k-ssat-mbi", "ablation", [
        {"row": "curious|on", "set": SHARED},  # table1's SSAT-MBI: reused
        {"row": "const|off", "set": {"attack.schedule": "const", "method.interpolate": False}}]),
    "mnist5k-paper-table3.yaml": ("p-table3", "mnist5k-ssat-mbi", "schedules", [
        {"row": "Curious", "set": SHARED}, {"row": "Linear", "set": {"attack.schedule": "linear", "attack.t": 1}}]),
    "mnist5k-paper-table4.yaml": ("p-table4", "mnist5k-ssat-mbi-awr", "awr-ablation", [
        {"row": "curious|on", "set": {**SHARED, **AWR}}]),
    "mnist5k-paper-tables6-7.yaml": ("p-tables6-7", "mnist5k-trades", "supervised", [
        {"row": "TRADES", "set": {"attack.schedule": "const", "method.interpolate": False}},
        {"row": "TRADES+Ours", "set": SHARED}]),
    "mnist5k-paper-fig4.yaml": ("p-fig4", "mnist5k-ssat-mbi", "beta-sensitivity", [
        {"row": "beta=0.4", "set": SHARED}, {"row": "beta=1.0", "set": {**SHARED, "method.beta": 1.0}}]),
    "mnist5k-paper-fig5.yaml": ("p-fig5", "mnist5k-ssat-mbi", "rho-sensitivity", [
        {"row": "rho0=0.05", "set": SHARED}, {"row": "rho0=0.1", "set": {**SHARED, "method.rho0": 0.1}}]),
}
TRAINED_ONCE = 2 + 1 + 1 + 1 + 2 + 1 + 1  # the shared configuration counts in table1 only


def write_specs(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    tiny = {**TINY_OVERRIDES, "data.n_val": 40, "eval.checkpoints": ["best"], "eval.pgd_steps": [20],
            "eval.autoattack": False, "eval.autoattack_n": 10}
    for file, (name, preset, table, grid) in PARTS.items():
        spec = {"name": name, "preset": preset, "table": table, "column_group": "mnist5k/cnn-small",
                "epochs": 1, "overrides": tiny, "seeds": [0], "resources": {"cpu": 1, "gpu": 0},
                "max_concurrent": 2, "grid": grid, **({"stage": "demo"} if name == "p-table2" else {})}
        (folder / file).write_text(yaml.safe_dump(spec, sort_keys=False))
    return folder


def _interrupt_when_started(workdir: Path, sweep: str) -> threading.Event:
    sent = threading.Event()

    def watch():
        t0 = time.monotonic()
        while time.monotonic() - t0 < 400:
            results = list((workdir / "runs" / "sweeps" / sweep / "tune").glob("*/*/result.json"))
            handler = type(getattr(signal.getsignal(signal.SIGINT), "__self__", None)).__name__
            if results and handler == "Interrupt":
                os.kill(os.getpid(), signal.SIGINT)
                sent.set()
                return
            time.sleep(0.2)

    threading.Thread(target=watch, daemon=True).start()
    return sent


def trained_runs(uri: str) -> list:
    """Every trial run that trained (no reference run) in the store."""
    c = MlflowClient(uri)
    ids = [e.experiment_id for e in c.search_experiments()]
    return [r for r in c.search_runs(ids, "tags.`ssat.kind` = 'trial'", max_results=1000)
            if "ssat.reuses" not in r.data.tags]


def test_the_paper_in_miniature_into_every_table_and_figure(ray_local, teacher_dir, tmp_path, capfd):
    specs = write_specs(tmp_path / "specs")
    args = ["paper", "--specs", str(specs), "--workdir", str(tmp_path), "--autoattack-images", "10",
            "--autoattack-seeds", "0"]
    sent = _interrupt_when_started(tmp_path, "p-table3")  # Ctrl+C in the third part
    assert sweeps_main(args) == 1 and sent.is_set()
    out = capfd.readouterr().out
    assert "[paper] stopped in table3" in out and "run `make paper` again to go on" in out
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    before = {r.info.run_id: r.data.metrics.get("time/epochs") for r in trained_runs(uri)
              if r.info.status == "FINISHED"}
    assert sweeps_main(args) == 0
    out = capfd.readouterr().out
    assert "table1: its sweep p-table1 finished before; nothing to run" in out
    assert "table3: resuming its sweep p-table3" in out
    runs = trained_runs(uri)
    assert all(r.info.status == "FINISHED" for r in runs)
    keys = [(r.data.tags["ssat.config_hash"], r.data.tags["ssat.seed"]) for r in runs]
    assert len(keys) == len(set(keys)) == TRAINED_ONCE  # every configuration and seed trained once, in all
    assert {r.info.run_id for r in runs} >= set(before)  # nothing finished before the Ctrl+C was trained again
    shared = next(r for r in runs if r.data.tags["ssat.sweep"] == "p-table1" and r.data.tags["ssat.row"] == "SSAT-MBI")
    assert "[reuse] 1 of 2 trials reused: 1 from p-table1" in out
    check_report(tmp_path / "outputs" / "paper", shared.info.run_id)
    assert all("test/best/autoattack" in r.data.metrics for r in runs if r.data.tags["ssat.seed"] == "0")


def check_report(out: Path, shared_id: str) -> None:
    """Every part's table in every format with its provenance, the figures, and the shared trial's run behind a
    cell of each table whose rows take it."""
    index = (out / "index.md").read_text()
    for part, tables in (("table1", ["main"]), ("table2", ["ablation"]), ("table3", ["schedules"]),
                         ("table4", ["awr-ablation"]), ("table5", ["training-time"]), ("tables6-7", ["supervised"]),
                         ("fig4", ["beta-sensitivity"]), ("fig5", ["rho-sensitivity"])):
        assert f"({part}/" in index or f"{part}/" in index, part
        for table in tables:
            for ext in ("md", "tex", "csv"):
                assert (out / part / f"{table}.{ext}").stat().st_size > 0, (part, table, ext)
    for part, png in (("table2", "ablation.png"), ("fig4", "beta.png"), ("fig5", "rho.png")):
        assert (out / part / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", (part, png)
    for part, table in (("table1", "main"), ("table2", "ablation"), ("fig4", "beta-sensitivity"),
                        ("fig5", "rho-sensitivity")):
        prov = json.loads(next((out / part).glob(f"{table}*provenance*.json")).read_text())
        assert shared_id in json.dumps(prov), (part, table)  # the cell points at the run that trained
