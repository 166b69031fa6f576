"""sweeps/paper.py without training: the parts in the paper's order, --only, the plan of what is trained once, and
the miniature specs all on the demo's protocol (the same overrides, so a shared configuration is one run)."""
from __future__ import annotations

import json

import pytest
import yaml

from sweeps.errors import UsageError
from sweeps.demo import setup_text
from sweeps.paper import PARTS, SPECS, attacked, chosen, plan

DEMO = yaml.safe_load((SPECS / "mnist5k-demo.yaml").read_text())
EPOCH_KEYS = ("optim.lr_milestones", "optim.swa_start")


@pytest.mark.parametrize("part", [p for p in PARTS if p.spec and p.spec != "mnist5k-demo.yaml"], ids=lambda p: p.name)
def test_every_miniature_spec_is_on_the_demos_protocol(part):
    spec = yaml.safe_load((SPECS / part.spec).read_text())
    same = {k: v for k, v in spec["overrides"].items() if k not in EPOCH_KEYS}
    assert same == {k: v for k, v in DEMO["overrides"].items() if k not in EPOCH_KEYS}
    assert (spec["seeds"], spec["resources"], spec["max_concurrent"]) == ([0, 1], DEMO["resources"], 2)
    if spec["epochs"] == DEMO["epochs"]:  # the fully labeled part is shorter: its epoch numbers scaled (its comments)
        assert {k: spec["overrides"][k] for k in EPOCH_KEYS} == {k: DEMO["overrides"][k] for k in EPOCH_KEYS}
    else:
        assert part.name == "tables6-7" and spec["overrides"]["optim.lr_milestones"] == [8]


def test_the_parts_are_in_the_papers_order_and_only_picks_some():
    assert [p.name for p in PARTS] == ["table1", "table2", "table3", "table4", "table5", "tables6-7", "fig4", "fig5"]
    assert [p.name for p in chosen(["fig4", "table2"])] == ["table2", "fig4"]
    assert [p.name for p in chosen(["table5"])] == ["table1", "table5"]  # it reads table1's runs
    with pytest.raises(UsageError, match=r"--only: tabel1; allowed: table1, table2, table3, table4, table5, "
                                         r"tables6-7, fig4, fig5"):
        chosen(["tabel1"])


def test_the_plan_trains_a_shared_configuration_once():
    """SSAT-MBI's defaults are a row of five parts; Table 3's Const and Linear-60 are the demo's const|on and
    linear|on; Table 4's Cur.|int is Table 1's SSAT-MBI-AWR; Fig. 5's (0.05, 1.0) is Fig. 4's beta 1.0."""
    work = plan(chosen(None))
    assert {k: (w["trials"], w["reused"]) for k, w in work.items()} == {
        "table1": (10, 0), "table2": (14, 2), "table3": (14, 6), "table4": (12, 2), "tables6-7": (4, 0),
        "fig4": (10, 2), "fig5": (12, 4)}
    assert sum(w["trials"] - w["reused"] for w in work.values()) == 60
    assert work["tables6-7"]["epochs"] == 4 * 12 and work["table1"]["epochs"] == 10 * 70


def test_a_captions_autoattack_is_the_one_make_paper_ran_not_the_specs():
    """The specs keep the demo's AutoAttack settings (they are in the config hash: a shared trial would differ);
    the caption says what ran after the trials."""
    cfg = plan(chosen(["fig5"]))["fig5"]["spec"].trials()[0].config
    assert setup_text(cfg).endswith("AutoAttack: the first 100 test images, seed 0's best checkpoint of the best row "
                                    "by PGD-20")
    assert setup_text(attacked(cfg, (0, 1), 50)).endswith("AutoAttack: the first 50 test images, seeds 0, 1's best "
                                                          "checkpoint")
    assert setup_text(attacked(cfg, (3,), 7)).endswith("AutoAttack: the first 7 test images, seed 3's best checkpoint")


# ---- the command's own bookkeeping (the sweeps themselves run in tests/integration/test_paper.py) ----------------
def test_the_machine_line_names_the_cpu_its_cores_and_python():
    import os
    import platform

    from sweeps.paper import machine

    text = machine()
    model = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    assert text == (f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
                    f"Python {platform.python_version()}")


def _state(tmp_path, name: str, status: str, reused: dict | None = None):
    from sweeps.driver.sweep import RunArgs, SweepState
    from sweeps.paths import sweep_paths

    paths = sweep_paths(tmp_path, name)
    paths.state.parent.mkdir(parents=True, exist_ok=True)
    state = SweepState(name, "spec.yaml", {}, "sqlite:///x.db", RunArgs(), status=status, reused=reused or {})
    state.save(paths)
    return state


def test_a_part_whose_sweep_finished_before_runs_nothing(tmp_path):
    from sweeps.paper import run_part

    work = plan(chosen(["fig4"]))["fig4"]
    _state(tmp_path, "mnist5k-paper-fig4", "done")
    lines = []
    assert run_part(PARTS[6], work, tmp_path, 0, log=lines.append) is None
    assert lines == ["[paper] fig4: its sweep mnist5k-paper-fig4 finished before; nothing to run"]


class Args:
    def __init__(self, workdir, only=None):
        self.workdir, self.only, self.specs, self.autoattack_seeds, self.autoattack_images = workdir, only, None, \
            [0, 1], 50


def test_the_parts_run_in_order_each_told_the_epochs_left_after_it_and_timed_when_it_ran(tmp_path, monkeypatch):
    """A part that finished before (None) is not timed again; one that ran (0) is; the first that fails stops the
    command with its exit code and what to do, before AutoAttack and the report."""
    import json

    import sweeps.paper as paper

    calls, finished = [], []
    codes = {"table2": None, "table4": 3}
    monkeypatch.setattr(paper, "run_part", lambda part, work, wd, left, log: calls.append((part.name, left))
                        or codes.get(part.name, 0))
    monkeypatch.setattr(paper, "finish", lambda *a, **k: finished.append(a) or 0)
    timings = tmp_path / "runs" / "paper" / "timings.json"
    timings.parent.mkdir(parents=True)
    timings.write_text(json.dumps({"table2": {"wall_s": 99.0}}))
    lines = []
    assert paper.run_paper(Args(tmp_path), log=lines.append) == 3
    work = plan(chosen(None))
    epochs = {k: w["epochs"] for k, w in work.items()}
    total = sum(epochs.values())
    assert calls == [("table1", total - epochs["table1"]),
                     ("table2", total - epochs["table1"] - epochs["table2"]),
                     ("table3", total - epochs["table1"] - epochs["table2"] - epochs["table3"]),
                     ("table4", total - epochs["table1"] - epochs["table2"] - epochs["table3"] - epochs["table4"])]
    assert lines[0] == (f"[paper] 8 part(s), {sum(w['trials'] for w in work.values())} trials, "
                        f"{sum(w['reused'] for w in work.values())} of them shared between parts (trained once), "
                        f"{total:,} trial-epochs to train at most")
    assert lines[-1] == ("[paper] stopped in table4 (exit 3); run `make paper` again to go on (nothing finished is "
                         "trained again)")
    assert [ln.split(" (")[0] for ln in lines[1:-1]] == ["[paper] table1 done", "[paper] table2 done",
                                                         "[paper] table3 done"]
    saved = json.loads(timings.read_text())
    assert set(saved) == {"table1", "table2", "table3"} and saved["table2"] == {"wall_s": 99.0}  # not re-timed
    assert finished == []
    codes["table4"] = 0
    assert paper.run_paper(Args(tmp_path, only=["fig5"]), log=lines.append) == 0
    (parts, work5, workdir, saved5, _, autoattack, log), = finished
    assert [p.name for p in parts] == ["fig5"] and list(work5) == ["fig5"] and workdir == tmp_path.resolve()
    assert autoattack == ((0, 1), 50) and set(saved5) == {"table1", "table2", "table3", "fig5"} and log == lines.append


def test_each_parts_report_entry_counts_its_own_trials_and_table5_reads_table1s(tmp_path):
    from analysis.paper_report import Part
    from sweeps.paper import _report_part

    work = plan(chosen(["table5", "fig4"]))
    names = {"table1": "mnist5k-paper-table1", "table5": "mnist5k-paper-table1", "fig4": "mnist5k-paper-fig4"}
    states = {"table1": _state(tmp_path, names["table1"], "done", {"grid": {"a": 1, "b": 2}, "other": {"c": 3}}),
              "fig4": _state(tmp_path, names["fig4"], "done", {"grid": {"a": 1, "b": 2}})}
    timings = {"table1": {"wall_s": 12.5}}
    t1, t5, f4 = (_report_part(p, work, names, states, timings, Part, ((0, 1), 50))
                  for p in chosen(["table5", "fig4"]))
    assert (t1.name, t1.experiments, t1.tables, t1.figures, t1.stages) == (
        "table1", ["mnist5k-paper-table1"], ["main"], [], None)
    assert (t1.wall_seconds, t1.trained, t1.reused) == (12.5, 10 - 3, 3)
    assert (t5.name, t5.experiments, t5.wall_seconds, t5.trained, t5.reused, t5.reads) == (
        "table5", ["mnist5k-paper-table1"], None, 0, 0, "table1")
    assert t1.reads == f4.reads == ""
    assert (f4.figures, f4.wall_seconds, f4.trained, f4.reused) == (["beta"], None, 8, 2)
    assert t5.title == "Table 5: training time" and t5.setup == t1.setup
    assert t1.setup.endswith("AutoAttack: the first 50 test images, seeds 0, 1's best checkpoint")


def test_finish_attacks_every_parts_sweep_once_then_writes_the_report_with_the_autoattack_time(tmp_path, monkeypatch):
    import time

    import analysis.paper_report as paper_report
    import sweeps.subset_autoattack as subset
    from sweeps.paper import finish

    parts = chosen(["table5", "fig4"])
    work = plan(parts)
    _state(tmp_path, "mnist5k-paper-table1", "done")
    _state(tmp_path, "mnist5k-paper-fig4", "done")
    attacked_with, reported = [], []
    monkeypatch.setattr(subset, "run_autoattack", lambda *a: attacked_with.append(a) or 3)
    monkeypatch.setattr(paper_report, "write_report", lambda *a: reported.append(a) or tmp_path / "index.md")
    timings, lines = {}, []
    assert finish(parts, work, tmp_path, timings, time.perf_counter(), ((0, 1), 50), lines.append) == 0
    (uri, experiments, seeds, images, workdir, _), = attacked_with
    assert (uri, experiments, seeds, images, workdir) == (
        "sqlite:///x.db", ["mnist5k-paper-table1", "mnist5k-paper-fig4"], (0, 1), 50, tmp_path)
    (report, out, uri2, _, date, steps), = reported
    assert [p.name for p in report] == ["table1", "table5", "fig4"] and out == tmp_path / "outputs" / "paper"
    assert uri2 == "sqlite:///x.db" and date == time.strftime("%Y-%m-%d")
    assert set(timings) == {"autoattack"} and steps == {"AutoAttack": timings["autoattack"]["wall_s"]} != {}
    saved = json.loads((tmp_path / "runs" / "paper" / "timings.json").read_text())
    assert saved == timings  # kept for a rerun, which attacks nothing
    monkeypatch.setattr(subset, "run_autoattack", lambda *a: 0)
    reported.clear()
    assert finish(parts, work, tmp_path, saved, time.perf_counter(), ((0, 1), 50), lines.append) == 0
    assert reported[0][5] == {"AutoAttack": timings["autoattack"]["wall_s"]}  # the time of the run that attacked
    assert lines[-1].startswith("[paper] done in ") and lines[-1].endswith(f": {tmp_path / 'index.md'}")
