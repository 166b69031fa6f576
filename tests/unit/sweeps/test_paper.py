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
    (uri, experiments, seeds, images, _), = attacked_with
    assert (uri, experiments, seeds, images) == (
        "sqlite:///x.db", ["mnist5k-paper-table1", "mnist5k-paper-fig4"], (0, 1), 50)
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


def test_the_machine_line_reads_the_cpus_name_after_the_first_colon_else_the_platforms(tmp_path):
    import os
    import platform

    from sweeps.paper import machine

    rest = f"{os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}"
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: X\nmodel name\t: Foo: Bar 9000 @ 2.0GHz\nmodel name\t: other\n")
    assert machine(info) == f"Foo: Bar 9000 @ 2.0GHz, {rest}"
    info.write_text("processor\t: 0\nCPU part\t: 0xd0c\n")  # an ARM machine's cpuinfo names no model
    assert machine(info) == f"{platform.processor()}, {rest}"
    assert machine(tmp_path / "absent") == f"{platform.processor()}, {rest}"


def test_only_names_every_unknown_part():
    with pytest.raises(UsageError) as e:
        chosen(["fig9", "table8", "fig4"])
    assert str(e.value) == ("--only: fig9, table8; allowed: table1, table2, table3, table4, table5, tables6-7, fig4, "
                            "fig5")


class FakeClock:
    """time.perf_counter for sweeps.paper: each call 12.345 s after the one before."""

    def __init__(self):
        self.now = 1000.0

    def perf_counter(self):
        self.now += 12.345
        return self.now

    strftime = staticmethod(__import__("time").strftime)


def _stub_sweeps(monkeypatch, rc=0):
    import sweeps.driver.sweep as driver

    calls = []
    monkeypatch.setattr(driver, "run_sweep", lambda *a, **k: calls.append(("run", a, k, _outer())) or rc)
    monkeypatch.setattr(driver, "resume_sweep", lambda *a, **k: calls.append(("resume", a, k, _outer())) or rc)
    return calls


def _outer():
    from sweeps.trials.progress_callback import OuterJob

    return OuterJob.name, OuterJob.later_epochs


@pytest.mark.parametrize("gpus, cpus, want", [(0, 4, dict(cpu_only=True, gpu_share=None, sets={}, max_concurrent=2)),
                                              (2, 4, "gpu"), (2, None, "gpu")])
def test_a_new_part_runs_its_spec_with_reuse_on_the_demos_hardware(tmp_path, monkeypatch, gpus, cpus, want):
    """No sweep yet: run_sweep(the spec file, RunArgs(reuse=True, the demo's hardware plan)) inside the paper's
    progress (the epochs of the parts after it), its exit code returned."""
    import os

    import torch

    from sweeps.demo import GPU_SETS, GPU_SHARE, gpu_plan
    from sweeps.driver.run_options import RunArgs
    from sweeps.paper import run_part

    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    calls = _stub_sweeps(monkeypatch, rc=5)
    work = plan(chosen(["table3"]))["table3"]
    lines = []
    assert run_part(PARTS[2], work, tmp_path, 77, log=lines.append) == 5
    (kind, args, kw, outer), = calls
    hw = gpu_plan(gpus, cpus or 1, None)
    if want == "gpu":
        assert (hw["cpu_only"], hw["gpu_share"], hw["sets"]) == (False, GPU_SHARE, GPU_SETS)
        assert hw["max_concurrent"] == min(round(gpus / GPU_SHARE), max(1, (cpus or 1) - 1))
    else:
        assert hw == want
    assert kind == "run" and args == (work["file"], RunArgs(reuse=True, **hw))
    assert kw == {"workdir": tmp_path, "log": lines.append} and outer == ("the paper", 77)
    assert _outer() == (None, 0)  # the paper's progress ends with the part
    assert lines == [f"[paper] table3: sweep mnist5k-paper-table3, {work['trials']} trials ({work['reused']} of them "
                     "another part's)"]


def test_a_cut_part_resumes_its_sweep_and_reruns_its_failed_trials(tmp_path, monkeypatch):
    from sweeps.paper import run_part

    calls = _stub_sweeps(monkeypatch, rc=0)
    work = plan(chosen(["fig5"]))["fig5"]
    _state(tmp_path, "mnist5k-paper-fig5", "incomplete")
    lines = []
    assert run_part(PARTS[7], work, tmp_path, 12, log=lines.append) == 0
    assert calls == [("resume", ("mnist5k-paper-fig5",), {"workdir": tmp_path, "rerun_failed": True,
                                                          "log": lines.append}, ("the paper", 12))]
    assert lines == ["[paper] fig5: resuming its sweep mnist5k-paper-fig5"]


def test_every_part_runs_each_timed_by_the_clock_and_saved_as_it_ends(tmp_path, monkeypatch):
    """All parts run (table5, which has no sweep, is passed over, not the end); each part's wall time is saved in
    runs/paper/timings.json (made with its folders) as it ends; the command's total comes from the same clock."""
    import json

    import sweeps.paper as paper

    clock, seen, finished = FakeClock(), [], []
    monkeypatch.setattr(paper, "time", clock)

    def run_part(part, work, workdir, left, log):
        seen.append((part.name, work, workdir, log))
        return 0

    monkeypatch.setattr(paper, "run_part", run_part)
    monkeypatch.setattr(paper, "finish", lambda *a: finished.append(a) or 0)
    lines = []
    work = plan(chosen(None))
    assert paper.run_paper(Args(tmp_path), log=lines.append) == 0
    assert [s[0] for s in seen] == ["table1", "table2", "table3", "table4", "tables6-7", "fig4", "fig5"]
    assert all(w == work[n] and wd == tmp_path.resolve() and log == lines.append for n, w, wd, log in seen)
    saved = (tmp_path / "runs" / "paper" / "timings.json").read_text()
    timings = {n: {"wall_s": 12.3} for n, *_ in seen}
    assert saved == json.dumps(timings, indent=1)
    # t0 is the clock's first reading; part k is said done at its (3k + 4)th, 3k + 3 steps of 12.345 s later
    from sweeps.trials.progress_callback import duration

    assert lines[1:] == [f"[paper] {n} done ({duration(12.345 * (3 * k + 3))} so far)" for k, (n, *_) in
                         enumerate(seen)]
    (parts, work2, workdir, timings2, t0, autoattack, log), = finished
    assert t0 == 1012.345 and timings2 == timings and autoattack == ((0, 1), 50) and log == lines.append


def test_the_specs_folder_option_plans_from_its_files(tmp_path, monkeypatch):
    import sweeps.paper as paper

    specs = tmp_path / "specs"
    specs.mkdir()
    raw = yaml.safe_load((SPECS / "mnist5k-paper-fig5.yaml").read_text())
    raw["seeds"] = raw["seeds"][:1]  # one seed of two: half the trials
    (specs / "mnist5k-paper-fig5.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setattr(paper, "run_part", lambda *a: 0)
    monkeypatch.setattr(paper, "finish", lambda parts, work, *a: work)
    args = Args(tmp_path, only=["fig5"])
    args.specs = str(specs)
    work = paper.run_paper(args, log=lambda s: None)
    assert 2 * work["fig5"]["trials"] == plan(chosen(["fig5"]))["fig5"]["trials"]


def test_finish_times_autoattack_by_the_clock_and_keeps_its_time_only_when_it_attacked(tmp_path, monkeypatch):
    import json

    import analysis.paper_report as paper_report
    import sweeps.paper as paper
    import sweeps.subset_autoattack as subset
    from sweeps.trials.progress_callback import duration

    parts = chosen(["table2", "table5"])
    work = plan(parts)
    for name in ("mnist5k-demo", "mnist5k-paper-table1"):
        _state(tmp_path, name, "done")
    clock, attacked_with, reported, lines = FakeClock(), [], [], []
    monkeypatch.setattr(paper, "time", clock)
    monkeypatch.setattr(subset, "run_autoattack", lambda *a: attacked_with.append(a) or 2)
    monkeypatch.setattr(paper_report, "write_report", lambda *a: reported.append(a) or tmp_path / "index.md")
    timings = {"table5": {"wall_s": 4.0}, "table2": {"wall_s": 8.0}}
    for _ in range(2):  # a second attack (new runs) writes over the first's time
        assert paper.finish(parts, work, tmp_path, timings, 1000.0, ((0,), 20), lines.append) == 0
    assert attacked_with[0][-1] == lines.append
    assert timings["autoattack"] == {"wall_s": 12.3}
    assert (tmp_path / "runs" / "paper" / "timings.json").read_text() == json.dumps(timings, indent=1)
    report, out, uri, machine, date, steps = reported[-1]
    assert machine == paper.machine() and steps == {"AutoAttack": 12.3}
    t2, t5 = report[1], report[2]  # table1 comes along for table5, first
    assert (t2.stages, t2.wall_seconds) == (("demo",), 8.0) and (t5.stages, t5.wall_seconds) == (None, None)
    assert lines[-1] == f"[paper] done in {duration(clock.now - 1000.0)}: {tmp_path / 'index.md'}"
    monkeypatch.setattr(subset, "run_autoattack", lambda *a: 0)
    assert paper.finish(parts, work, tmp_path, {}, 1000.0, ((0,), 20), lines.append) == 0
    assert reported[-1][5] == {}  # nothing attacked and no time of an earlier attack: no AutoAttack step
