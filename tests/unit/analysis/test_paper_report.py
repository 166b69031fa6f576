"""analysis.paper_report on a real MLflow store of hand-built runs: a complete part gets every file (tables in four
forms, figures, curves, convergence, claims), a part whose sweep never ran is "not run" with its claims not measurable,
the index is in the paper's order with every link pointing at a file, and the claims' verdicts in it are those of
the numbers typed here (Welch's p by scipy)."""
import json
import re
from pathlib import Path

import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
from scipy import stats

from analysis import claims
from analysis.collect import runs_frame
from devtools.servers import sqlite_store
from analysis.paper_report import (Part, PartOut, TableOut, duration, load_part, paper_beside, paper_place, sections,
                                   write_part_table, write_report)
from tests.unit.analysis.test_claims import PARAMS, built, records, run

# Table 2 in small: interpolation raises PGD-20 under each schedule by 4 points, 2 seeds a row
ABLATION = {f"{g}|{i}": {"clean": [90.0 + k, 90.4 + k], "autoattack": [50.0 + k, 50.5 + k],
                         "pgd20": [60.0 + 4 * (i == "int") + k, 60.2 + 4 * (i == "int") + k]}
            for k, g in enumerate(("none", "Lin.", "Cur.")) for i in ("no-int", "int")}
MAIN = {"SSAT-MBI": {"clean": [91.0, 91.2], "pgd10": [72.0, 72.3], "pgd20": [70.0, 70.4], "pgd40": [69.0, 69.2],
                     "hours": [0.105, 0.107], "epochs": [70, 70]},
        "RST": {"clean": [91.5, 91.1], "pgd10": [70.0, 70.1], "pgd20": [68.0, 68.3], "pgd40": [67.0, 67.1],
                "hours": [0.100, 0.101], "epochs": [70, 70]}}


CONVERGING = ((2.0, 60.0, 30.0), (1.0, 80.0, 55.0), (0.8, 80.5, 55.5))  # per epoch: training loss, val clean, PGD


def log_runs(client, experiment, table, values, tmp_path, stage="grid", history=CONVERGING):
    """The cells `values` (row -> column -> per seed) as finished trial runs of `experiment` in `stage`, each with
    three epochs of `history`."""
    found = client.get_experiment_by_name(experiment)
    exp = found.experiment_id if found else client.create_experiment(
        experiment, artifact_location=(tmp_path / experiment).as_uri())
    for row, cols in values.items():
        for seed in range(len(next(iter(cols.values())))):
            rec = run("main" if table == "training-time" else table, seed, {c: v[seed] for c, v in cols.items()},
                      **PARAMS[table](row), label=row)
            rec["meta.stage"] = stage
            tags = {f"ssat.{k[5:]}": str(v) for k, v in rec.items() if k.startswith("meta.") and v is not None}
            tags.update({f"protocol/{k[9:]}": v for k, v in rec.items() if k.startswith("protocol.")})
            rid = client.create_run(exp, tags=tags, run_name=f"{row} s{seed}").info.run_id
            params = [Param(k[6:], str(v)) for k, v in rec.items() if k.startswith("param.") and v is not None]
            metrics = [Metric(k[7:], v, 0, 3) for k, v in rec.items() if k.startswith("metric.")]
            for step, (loss, clean, pgd) in enumerate(history, 1):
                metrics += [Metric("train/loss", loss, 0, step), Metric("val/clean", clean, 0, step),
                            Metric("val/pgd10", pgd, 0, step)]
            client.log_batch(rid, metrics=metrics, params=params)
            client.set_terminated(rid)


PARTS = [
    Part("table1", "Table 1: the five methods", ["mini-table1"], ["main", "training-time"], [], setup="CPU-sized: x",
         wall_seconds=100.0, trained=4, reused=0),
    Part("table2", "Table 2: the ablation", ["mini-table2"], ["ablation"], ["ablation", "beta"], stages=("grid",),
         wall_seconds=200.0, trained=10, reused=2),
    Part("fig4", "Fig. 4: beta", ["mini-fig4"], ["beta-sensitivity"], ["beta"]),
]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The report of the three parts, written once for this file's tests."""
    tmp_path = tmp_path_factory.mktemp("paper-report")
    store = sqlite_store(tmp_path)
    client = MlflowClient(store)
    log_runs(client, "mini-table2", "ablation", ABLATION, tmp_path)
    log_runs(client, "mini-table1", "main", MAIN, tmp_path)
    out = tmp_path / "report"
    # the parts in another order than the paper's: the index sorts them
    index = write_report([PARTS[2], PARTS[1], PARTS[0]], out, store, "test machine (2 cores)", "2026-11-29")
    return out, index, store


def test_a_complete_part_gets_every_file_and_a_part_not_run_none(report):
    out, index, _ = report
    assert index == out / "index.md"
    for name in ("ablation.md", "ablation.tex", "ablation.csv", "ablation.provenance.json", "ablation.png",
                 "curves.png", "convergence.md", "claims.md", "claims.json"):
        assert (out / "table2" / name).stat().st_size > 0, name
    for name in ("main.md", "main.tex", "main.csv", "main.provenance.json", "training-time.md", "training-time.csv",
                 "curves.png", "convergence.md", "claims.md", "claims.json"):
        assert (out / "table1" / name).stat().st_size > 0, name
    assert not (out / "table2" / "beta.png").exists() and not (out / "fig4").exists()
    prov = json.loads((out / "table2" / "ablation.provenance.json").read_text())
    options = prov["options"]
    assert options["compare_paper"] and options["allow_subset"] and options["stages"] == ["grid"]
    assert prov["command"] == ["python", "-m", "sweeps", "paper"]
    assert "CPU-sized: x" in (out / "table1" / "main.md").read_text()
    assert "| Clean (paper) |" in (out / "table2" / "ablation.md").read_text()


def test_the_index_is_in_the_papers_order_and_every_link_is_a_file(report):
    out, index, _ = report
    text = index.read_text()
    heads = re.findall(r"^## (.*)$", text, re.M)
    assert heads == ["Table 1: the five methods", "Table 2: the ablation",
                     "Table 5: Average training time of the main-table runs (fp32 training) (from the runs of "
                     "Table 1: the five methods)", "Fig. 4: beta"]
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert len(links) > 20
    for link in links:
        assert (out / link).is_file(), link
    for name in ("ablation.md", "ablation.tex", "ablation.csv", "ablation.provenance.json", "ablation.png",
                 "curves.png", "convergence.md", "claims.md", "claims.json"):
        assert f"table2/{name}" in links
    assert "![ablation](table2/ablation.png)" in text and "![learning curves](table1/curves.png)" in text
    assert "*beta not drawn: " in text  # a figure that cannot be drawn is said, not fatal


def test_the_header_says_where_when_how_long_and_what_this_is(report):
    text = report[1].read_text()
    head = text.split("\n## ")[0]
    assert "Machine: test machine (2 cores) · date: 2026-11-29 · wall time: the parts' sweeps 5.0 min (1 part not " \
           "run in this invocation) · trials trained 14, reused 2" in head
    assert "MNIST-5k" in head and "cnn-small" in head and "no cell here is a paper cell" in head
    assert "Parts with runs: table2, table1; not run: fig4." in head
    table2 = text.split("## Table 2: the ablation")[1].split("\n## ")[0]
    assert "Sweep: `mini-table2` · wall time 3.3 min · trials trained 10, reused 2" in table2


def test_a_part_not_run_is_listed_with_its_claims_not_measurable(report):
    text = report[1].read_text()
    fig4 = text.split("## Fig. 4: beta")[1]
    assert "**Not run**: experiment 'mini-fig4' does not exist" in fig4
    assert "wall time not run in this invocation · trials trained 0, reused 0" in fig4
    keys = [c for c in claims.CLAIMS if c.table == "beta-sensitivity"]
    assert fig4.count("**not measurable**") == len(keys) == 3


def test_the_tables_stand_inline_with_the_paper_beside_them_and_the_convergence_verdicts(report):
    text = report[1].read_text()
    table2 = text.split("## Table 2: the ablation")[1].split("\n## ")[0]
    assert "| Lin. | ✓ |" in table2  # the table's own Markdown
    assert "Beside the paper: our cells and the paper's cells of the same rows (CIFAR-10 (WideResNet-28-5); " in table2
    assert "| Lin.\\|int | 91.20 (0.28)‡ | 83.85 | 65.10 (0.14) | 56.34 | 51.25 (0.35)‡§ | 50.52 |" in table2
    for row in ABLATION:
        assert f"- {row}: converged (2 seeds)" in table2
    table5 = text.split("## Table 5:")[1].split("\n## ")[0]
    assert "Time/epoch (min)" in table5 and "4.82" in table5  # the paper's RST hours beside ours
    fig = text.split("## Fig. 4")[1]
    assert "Beside the paper" not in fig


def test_the_claims_verdicts_are_those_of_the_numbers(report):
    out, index, _ = report
    records = {r["claim"]: r for r in json.loads((out / "table2" / "claims.json").read_text())}
    interp = records["table2-interpolation"]
    assert interp["verdict"] == "holds" and interp["group"] == "mnist5k/cnn-small"
    for c, g in zip(interp["comparisons"], ("none", "Lin.", "Cur.")):
        p = stats.ttest_ind(ABLATION[f"{g}|int"]["pgd20"], ABLATION[f"{g}|no-int"]["pgd20"], equal_var=False).pvalue
        assert c["p"] == pytest.approx(p)
    table1 = {r["claim"]: r["verdict"] for r in json.loads((out / "table1" / "claims.json").read_text())}
    assert table1["table1-pgd-rst"] == "holds" and table1["table1-pgd-uat"] == "not measurable"
    assert table1["table5-overhead"] == "holds"  # 0.106 / 0.1005 = 1.05 <= 1.10
    text = index.read_text()
    assert text.count("| Table 2 | Interpolated adversarial examples raise PGD-20 accuracy") == 1
    assert "Claims: 15 verdicts: 4 holds, 2 does not hold, 9 not measurable." in text


def test_paper_places_durations_and_sections():
    assert [paper_place(x) for x in ("Table 1", "Table 5", "Tables 6-7", "Fig. 4", "Fig. 5", "", "Notes")] == [
        (0, 1), (0, 5), (0, 6), (1, 4), (1, 5), (2, 0), (2, 0)]
    assert [duration(x) for x in (None, 45.2, 119.0, 120.0, 7199.0, 7200.0)] == [
        "not run in this invocation", "45 s", "119 s", "2.0 min", "120.0 min", "2.00 h"]
    outs = [PartOut(Part("fig5", "Fig. 5", [], [], ["rho"]), None),
            PartOut(Part("tables5-6", "Tables 6-7", [], ["supervised"], []), None, [TableOut("supervised")]),
            PartOut(Part("table1", "Table 1", [], ["main", "training-time"], []), None,
                    [TableOut("main"), TableOut("training-time")])]
    found = [(label, out.part.name, [t.table for t in tables], first) for label, out, tables, first in sections(outs)]
    assert found == [("Table 1", "table1", ["main"], True), ("Table 5", "table1", ["training-time"], False),
                     ("Tables 6-7", "tables5-6", ["supervised"], True), ("Fig. 5", "fig5", [], True)]


def test_a_part_is_not_run_without_an_experiment_a_store_or_a_finished_trial(report, tmp_path):
    store = report[2]
    client = MlflowClient(store)
    exp = client.create_experiment("half-done", artifact_location=(tmp_path / "a").as_uri())
    client.create_run(exp, tags={"ssat.kind": "trial", "ssat.status": "RUNNING"})
    assert load_part(Part("x", "X", ["half-done"], [], []), store) == (None, "no finished trial run in half-done")
    assert load_part(Part("x", "X", [], [], []), store) == (None, "no experiment named")
    runs, why = load_part(PARTS[1], store)
    assert why == "" and len(runs) == 12
    none, why = load_part(PARTS[1], f"sqlite:///{tmp_path / 'nowhere.db'}")
    assert none is None and why.startswith("no MLflow store at ")


def test_a_table_no_run_fills_is_its_error_and_its_claims_not_measurable(tmp_path):
    runs = runs_frame(records("main", {r: {k: v for k, v in c.items() if k not in ("hours", "epochs")}
                                       for r, c in MAIN.items()}))
    t = write_part_table(runs, "training-time", PARTS[0], tmp_path)
    assert t.files == {} and t.error.startswith("table 'training-time': none of the 4 runs")
    assert [v.verdict for v in t.verdicts] == [claims.UNMEASURABLE] * 2
    assert t.verdicts[0].text == f"No table: {t.error}"
    assert not list(tmp_path.iterdir())


def test_the_paper_beside_ours_per_group_and_none_for_a_figure():
    mixed = runs_frame(records("main", {"RST": MAIN["RST"]}) + records("main", {"RST": MAIN["RST"]},
                                                                       group="svhn/wrn-28-2"))
    from analysis.tables import build_table
    text = paper_beside(build_table(mixed, "main", allow_subset=True))
    assert text.startswith("Beside the paper: our cells and the paper's cells of the same rows (SVHN "
                           "(WideResNet-28-2), CIFAR-10 (WideResNet-28-5); ")  # the groups in the paper's order
    assert "| group (ours / paper's) | row | Clean (ours) | Clean (paper) |" in text
    # MNIST beside the paper's first group, SVHN beside the paper's SVHN
    assert "| MNIST-5k (cnn-small) / CIFAR-10 (WideResNet-28-5) | RST | 91.30 (0.28) | 82.65 |" in text
    assert "| SVHN (WideResNet-28-2) / SVHN (WideResNet-28-2) | RST | 91.30 (0.28) | 91.07 |" in text
    beta = built("beta-sensitivity", {"beta=0.4": {"clean": [90.0, 90.2]}})
    assert paper_beside(beta) == "The paper prints no numbers for Fig. 4: nothing to set beside ours.\n"
    scaled = built("schedules", {"Linear-42/70ep": {"clean": [90.0, 90.2]}})
    assert "| Linear-60 | 90.10 (0.14) | 83.85 |" in paper_beside(scaled)  # t 42 of 70 epochs: the paper's Linear-60


def test_the_header_adds_the_steps_after_the_sweeps_and_a_reading_part_is_not_untimed():
    from analysis.paper_report import header_text

    outs = [PartOut(Part("table1", "Table 1", ["a"], [], [], wall_seconds=300.0, trained=4), None),
            PartOut(Part("table5", "Table 5", ["a"], [], [], reads="table1"), None),
            PartOut(Part("fig4", "Fig. 4", ["b"], [], [], wall_seconds=60.0, trained=2, reused=1), None)]
    head = header_text(outs, "m", "d", {"AutoAttack": 150.0, "the report": 4.0})
    assert "Machine: m · date: d · wall time: the parts' sweeps 6.0 min, AutoAttack 2.5 min, the report 4 s · " \
           "trials trained 6, reused 1" in head
    assert "Parts with runs: table1, table5, fig4; not run: none. Claims: 0 verdicts: " in head
    outs[2] = PartOut(Part("fig4", "Fig. 4", ["b"], [], []), None)
    assert "the parts' sweeps 5.0 min (1 part not run in this invocation) · trials" in header_text(outs, "m", "d")


GOLDEN = Path(__file__).parents[2] / "data" / "paper-report" / "index.md"


def test_the_whole_index_byte_for_byte_written_again_into_a_new_nested_folder(tmp_path):
    """Every line of a report of six parts, as the file in tests/data (look at it to see the page): Table 4's
    ablation figure drawn from its own table, with a row of one seed that does not converge and two seeds of a row
    in another stage (left out of the table and the convergence report), Table 5 read from Table 1's runs, two
    parts not run, the AutoAttack step's time; the report written a second time into the same folder is the
    same."""
    store = sqlite_store(tmp_path)
    client = MlflowClient(store)
    log_runs(client, "mini-table2", "ablation", ABLATION, tmp_path)
    log_runs(client, "mini-table1", "main", MAIN, tmp_path)
    awr = {k: v for k, v in ABLATION.items() if k.startswith(("none", "Lin."))}
    log_runs(client, "mini-table4", "awr-ablation", awr, tmp_path)
    log_runs(client, "mini-table4", "awr-ablation", {"Lin.|int": awr["Lin.|int"]}, tmp_path, stage="search")
    log_runs(client, "mini-table4", "awr-ablation", {"Cur.|int": {c: v[:1] for c, v in ABLATION["Cur.|int"].items()}},
             tmp_path, history=((2.0, 60.0, 30.0), (1.9, 61.0, 31.0), (1.9, 61.0, 31.0)))  # one seed, flat
    parts = [
        Part("table1", "Table 1: the five methods", ["mini-table1"], ["main"], [], setup="CPU-sized: x",
             wall_seconds=100.0, trained=4), *PARTS[1:],
        Part("table4", "Table 4: the AWR ablation", ["mini-table4"], ["awr-ablation"], ["ablation"], stages=("grid",),
             wall_seconds=30.0, trained=8),
        Part("table5", "Table 5: training time", ["mini-table1"], ["training-time"], [], reads="table1"),
        Part("fig5", "Fig. 5: rho", ["mini-fig5"], ["rho-sensitivity"], ["rho"])]
    out = tmp_path / "deep" / "er"
    index = write_report(parts, out, store, "m (2 cores)", "2026-11-30", {"AutoAttack": 90.0})
    text = index.read_text().replace(str(tmp_path), "<tmp>")
    assert (out / "table4" / "ablation.png").stat().st_size > 0
    if not GOLDEN.exists() or GOLDEN.read_text() != text:  # the file to look at when it differs
        (tmp_path / "index.md").write_text(text)
    assert text == GOLDEN.read_text(), f"the index differs from {GOLDEN}: see {tmp_path / 'index.md'}"
    again = write_report(parts, out, store, "m (2 cores)", "2026-11-30", {"AutoAttack": 90.0})
    assert again.read_text().replace(str(tmp_path), "<tmp>") == text


def test_finished_trials_figure_options_and_a_part_placed_by_its_first_table():
    import pandas as pd

    from analysis.paper_report import _figure_options, _finished_trials, header_text

    frame = pd.DataFrame({"meta.status": ["FINISHED", "FINISHED", "RUNNING", "FINISHED"],
                          "meta.kind": ["trial", None, "trial", "sweep"]})
    assert _finished_trials(frame) == 2  # a run without a kind is a trial; a sweep's own run is not
    assert _finished_trials(frame.drop(columns="meta.kind")) == 3
    assert [_finished_trials(f) for f in (frame.drop(columns="meta.status"), frame.iloc[:0])] == [0, 0]
    table4 = Part("table4", "T4", [], ["awr-ablation"], ["ablation"], stages=("grid",))
    assert _figure_options(table4, "ablation") == {"allow_subset": True, "stages": ("grid",), "table": "awr-ablation"}
    both = Part("x", "X", [], ["ablation", "awr-ablation"], ["ablation"])
    assert _figure_options(both, "ablation") == {"allow_subset": True, "stages": None}
    assert _figure_options(table4, "beta") == {"allow_subset": True, "stages": ("grid",)}
    assert _figure_options(table4, "curves") == {"stages": ("grid",)}
    # a part is placed by its first table's place in the paper, whatever its name
    outs = [PartOut(Part("late", "Late", [], ["rho-sensitivity"], []), None, [TableOut("rho-sensitivity")]),
            PartOut(Part("mine", "Mine", [], ["main"], []), None, [TableOut("main")])]
    assert [(label, o.part.name) for label, o, _, _ in sections(outs)] == [("Table 1", "mine"), ("Fig. 5", "late")]
    for o in outs:
        o.not_run = "gone"
    assert "Parts with runs: none; not run: late, mine." in header_text(outs, "m", "d")


def test_a_section_names_every_sweep_of_its_part(tmp_path):
    from analysis.paper_report import section_text

    out = PartOut(Part("x", "X", ["a", "b"], [], [], wall_seconds=5.0), tmp_path / "x")
    assert section_text("Table 1", out, [], True, tmp_path) == (
        "## X\n\nSweep: `a`, `b` · wall time 5 s · trials trained 0, reused 0\n\n")
    out.part.experiments = []
    assert "Sweep: - · wall time" in section_text("Table 1", out, [], True, tmp_path)
