"""Issue 27: a store recorded before the run record took the config's dotted parameter names and the label tags reads
as it did, and the labels come from the run record.

tests/data/store-before-issue27/ holds a real MLflow store written by the code at d476b0a (a 5-row x 2-seed MNIST-5k
sweep of 2 epochs, and its teacher; compressed) and what that code's analysis printed from it (``expected/``); its
``make.sh`` made both. Here today's analysis reads the same store and must print the same text, byte for byte; the same
runs recorded as today's code records them (dotted names, label tags) print it too; a method or schedule that is not
in the frozen legacy map gets its rows from its own label tags, and without them is an error naming the run.
"""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis.collect import _mlflow_record, load_mlflow_history, load_mlflow_runs, runs_frame
from analysis.convergence import convergence_frame, to_markdown
from analysis.run_labels import LabelError
from analysis.tables import build_table, render_table
from analysis.tables import main as tables_main

ROOT = Path(__file__).resolve().parents[3]
HERE = ROOT / "tests" / "data" / "store-before-issue27"
EXPERIMENT = "before-issue27"
# expected/<file> -> (table, options) of the old code's `python -m analysis.tables` command that printed it (make.sh)
TABLES = {
    "ablation.md": ("ablation", {}), "ablation.tex": ("ablation", {}), "ablation.csv": ("ablation", {}),
    "ablation.compare-paper.md": ("ablation", {"compare_paper": True}),
    "main.md": ("main", {}),
    "main.any-tag.md": ("main", {"any_tag": True}), "main.any-tag.tex": ("main", {"any_tag": True}),
    "main.any-tag.csv": ("main", {"any_tag": True}),
    "schedules.any-tag.md": ("schedules", {"any_tag": True}), "schedules.any-tag.tex": ("schedules", {"any_tag": True}),
    "schedules.any-tag.csv": ("schedules", {"any_tag": True}),
    "beta-sensitivity.any-tag.md": ("beta-sensitivity", {"any_tag": True}),
    "rho-sensitivity.any-tag.md": ("rho-sensitivity", {"any_tag": True}),
}
FORMAT = {".md": "md", ".tex": "latex", ".csv": "csv"}

# What today's code records, typed here from docs/tracking.md and the registries (ssat/methods.py,
# ssat/schedules.py), not read from analysis: the parameter names before -> since issue 27, and the label tags.
NEW_NAME = {"method": "method.name", "schedule": "attack.schedule", "t": "attack.t", "gamma": "attack.gamma",
            "eps": "attack.eps", "rho0": "method.rho0", "rho_double_epoch": "method.rho_double_epoch",
            "beta": "method.beta", "tau": "method.tau", "K": "method.K", "lambda": "method.lam",
            "interpolate": "method.interpolate", "split_seed": "data.split_seed", "dataset": "data.dataset",
            "model": "model.name", "precision": "system.precision", "epochs": "optim.epochs",
            "swa_start": "optim.swa_start"}
METHOD_LABEL = {"ssat-mbi": "SSAT-MBI", "rst": "RST", "uat++": "UAT++", "trades": "TRADES", "srst-awr": "SRST-AWR",
                "ssat-mbi-awr": "SSAT-MBI-AWR"}
SCHEDULE_TAGS = {"const": {"label": "none", "title": "Const", "row": "Const"},
                 "linear": {"label": "Lin.", "title": "Linear", "row": "Linear-{t}"},
                 "curious": {"label": "Cur.", "title": "Curious", "row": "Curious-({gamma},{t})"}}


def expected(name: str) -> str:
    return (HERE / "expected" / name).read_text()


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """The shipped store, unpacked into a temporary folder (reading never touches tests/data)."""
    db = tmp_path_factory.mktemp("before-issue27") / "mlflow.db"
    with gzip.open(HERE / "mlflow.db.gz") as src, db.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return f"sqlite:///{db}"


@pytest.fixture(scope="module")
def runs(store) -> pd.DataFrame:
    return load_mlflow_runs([EXPERIMENT], store)


@pytest.fixture(scope="module")
def raw_records(store) -> list[dict]:
    """The store's runs as collect reads them, before runs_frame: the parameters under the names they were logged."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    exp = client.get_experiment_by_name(EXPERIMENT).experiment_id
    return [_mlflow_record(r, EXPERIMENT) for r in client.search_runs([exp], max_results=1000)]


def recorded_today(rec: dict, method_label=None, schedule_tags=None) -> dict:
    """A record as today's code writes it: the dotted parameter names, and on a trial the label tags of its method and
    schedule (`method_label`, `schedule_tags`: what a registry entry would say instead)."""
    out = {(f"param.{NEW_NAME[k[6:]]}" if k.startswith("param.") and k[6:] in NEW_NAME else k): v
           for k, v in rec.items()}
    if out.get("meta.kind") == "trial":
        method, schedule = out["param.method.name"], out["param.attack.schedule"]
        out["meta.method_label"] = method_label or METHOD_LABEL[method]
        out.update({f"meta.schedule_{k}": v for k, v in (schedule_tags or SCHEDULE_TAGS[schedule]).items()})
    return out


# ---- (a) the store written before issue 27 -----------------------------------------------------------------
def test_the_fixture_is_a_store_of_the_old_record(raw_records, runs):
    trials = [r for r in raw_records if r.get("meta.kind") == "trial"]
    assert len(trials) == 10 and len(raw_records) == 12  # 5 rows x 2 seeds, the teacher, the sweep's parent
    assert all("param.method" in r and "param.lambda" in r and "param.method.name" not in r for r in trials)
    assert not any(k.startswith(("meta.method_label", "meta.schedule_")) for r in raw_records for k in r)
    assert {r["param.schedule"] for r in trials} == {"const", "linear", "curious"}
    assert {r["param.method"] for r in trials} == {"ssat-mbi", "rst"}
    # read under today's names only
    assert {"param.method.name", "param.attack.schedule", "param.method.lam", "param.data.dataset"} <= set(runs.columns)
    assert not {"param.method", "param.schedule", "param.lambda", "param.t", "param.epochs"} & set(runs.columns)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_tables_of_the_old_store_are_what_the_old_code_printed(runs, name):
    table, options = TABLES[name]
    assert render_table(runs, table, FORMAT[Path(name).suffix], allow_subset=True, **options) == expected(name)


def test_the_convergence_report_of_the_old_store_is_what_the_old_code_printed(store, runs):
    assert to_markdown(convergence_frame(runs, load_mlflow_history(runs, store))) == expected("convergence.md")


def test_the_tables_cli_prints_what_the_old_code_printed(store, capsys):
    assert tables_main(["--experiment", EXPERIMENT, "--tracking-uri", store, "--table", "schedules", "--any-tag",
                        "--allow-subset", "--format", "latex"]) == 0
    assert capsys.readouterr().out == expected("schedules.any-tag.tex")


# ---- (b) the same runs recorded as today's code records them --------------------------------------------------
@pytest.mark.parametrize("name", ["ablation.md", "main.any-tag.md", "schedules.any-tag.tex",
                                  "rho-sensitivity.any-tag.md"])
def test_the_same_runs_recorded_today_print_the_same_tables(raw_records, name):
    today = runs_frame([recorded_today(r) for r in raw_records])
    assert "meta.method_label" in today and "param.method.lam" in today
    table, options = TABLES[name]
    assert render_table(today, table, FORMAT[Path(name).suffix], allow_subset=True, **options) == expected(name)


# ---- (c) a method and a schedule analysis has never heard of, with their labels ---------------------------
def toy(rec: dict) -> dict:
    """RST runs become runs of a method 'toy-at', linear runs runs of a schedule 'cosine', each with its labels."""
    rec = recorded_today(rec)
    if rec.get("meta.kind") != "trial":
        return rec
    if rec["param.method.name"] == "rst":
        rec.update({"param.method.name": "toy-at", "meta.method_label": "Toy-AT"})
    if rec["param.attack.schedule"] == "linear":
        rec.update({"param.attack.schedule": "cosine", "meta.schedule_label": "Cos.", "meta.schedule_title": "Cosine",
                    "meta.schedule_row": "Cosine-{t}/g{gamma}"})
    return rec


def test_a_new_method_and_schedule_get_their_rows_from_their_labels(raw_records, runs):
    new = runs_frame([toy(r) for r in raw_records])

    def row_cells(frame, table, row, **options):
        cells = build_table(frame, table, allow_subset=True, **options).cells
        return cells[cells["row"] == row].set_index("column")[["n", "mean", "std"]]

    # Table 1: the toy method is a row of its own, after the paper's, with the cells RST had
    main = build_table(new, "main", allow_subset=True, any_tag=True)
    assert main.blocks[-1][-1] == "Toy-AT" and not row_cells(new, "main", "RST", any_tag=True)["n"].any()
    pd.testing.assert_frame_equal(row_cells(new, "main", "Toy-AT", any_tag=True),
                                  row_cells(runs, "main", "RST", any_tag=True))
    # (the best, and only, row with results in the last block, whose baseline SRST-AWR has none: bold, untested)
    assert "| Toy-AT | **9.17** (1.18)§ |" in render_table(new, "main", "md", allow_subset=True, any_tag=True)
    # Table 2: 'Cos.|int' holds what 'Lin.|int' held; the Glo. note names it with its own row format
    pd.testing.assert_frame_equal(row_cells(new, "ablation", "Cos.|int"), row_cells(runs, "ablation", "Lin.|int"))
    md = render_table(new, "ablation", "md", allow_subset=True)
    assert "| Cos. | ✓ | 9.17 (1.18)‡§ |" in md and "| Lin. | ✓ | — |" in md
    assert "Glo. in these runs: Cos. = Cosine-1/2ep/g1.25, Cur. = Curious-(1.5,2/2ep) (paper:" in md
    # Table 3 and Fig. 5: the row format with t and gamma filled in, and the schedule's title
    assert "Cosine-1/2ep/g1.25" in build_table(new, "schedules", allow_subset=True, any_tag=True).blocks[-1]
    rho = build_table(new, "rho-sensitivity", allow_subset=True, any_tag=True)
    assert rho.groups == ["mnist5k/cnn-small beta=0.4, Const", "mnist5k/cnn-small beta=0.4, Cosine",
                          "mnist5k/cnn-small beta=0.4, Curious"]


def test_a_tag_wins_over_the_legacy_map(raw_records):
    """A run that records labels is shown with them, even for a method and schedule the legacy map knows."""
    renamed = runs_frame([recorded_today(r, method_label="SSAT-MBI (ours)",
                                         schedule_tags={"label": "L", "title": "T", "row": "R-{t}"})
                          for r in raw_records])
    assert "SSAT-MBI (ours)" in build_table(renamed, "main", allow_subset=True, any_tag=True).blocks[-1]
    assert set(build_table(renamed, "ablation", allow_subset=True).cells.query("n > 0")["row"]) == {
        "L|no-int", "L|int", "standard training"}
    assert {"R-1/2ep", "R-2/2ep"} <= set(build_table(renamed, "schedules", allow_subset=True, any_tag=True).blocks[-1])


# ---- (d) ... and without labels: an error that says what is missing and where ----------------------------
def unlabelled(rec: dict, method=None, schedule=None) -> dict:
    """The record of an RST (or linear) run as the code before issue 27 wrote it, of another method (schedule)."""
    rec = dict(rec)
    if rec.get("meta.kind") == "trial" and method and rec["param.method"] == "rst":
        rec["param.method"] = method
    if rec.get("meta.kind") == "trial" and schedule and rec["param.schedule"] == "linear":
        rec["param.schedule"] = schedule
    return rec


def test_a_method_without_a_label_is_an_error_naming_the_run(raw_records):
    runs = runs_frame([unlabelled(r, method="toy-at") for r in raw_records])
    with pytest.raises(LabelError) as err:
        build_table(runs, "main", allow_subset=True, any_tag=True)
    text = str(err.value)
    assert "method 'toy-at' has no label" in text and "no ssat.method_label tag" in text
    assert ("Give its entry in ssat/methods.py a label" in text and "RST-seed" in text
            and "experiment 'before-issue27'" in text)
    assert "ssat-mbi, rst, uat++, trades, srst-awr, ssat-mbi-awr" in text  # the methods the legacy map knows
    build_table(runs, "ablation", allow_subset=True)  # a table that does not show the method is not hindered


@pytest.mark.parametrize("table, options", [("ablation", {}), ("schedules", {"any_tag": True}),
                                            ("rho-sensitivity", {"any_tag": True})])
def test_a_schedule_without_labels_is_an_error_in_every_table_that_shows_it(raw_records, table, options):
    runs = runs_frame([unlabelled(r, schedule="cosine") for r in raw_records])
    with pytest.raises(LabelError, match=r"run 'linear\|on-seed[01]' \(experiment 'before-issue27', id [0-9a-f]+\): "
                                         r"schedule 'cosine' has no label: .*ssat\.schedule_.* tag"
                                         r".*ssat/schedules\.py"):
        build_table(runs, table, allow_subset=True, **options)


def test_the_cli_says_the_label_error_and_exits_2(tmp_path, capsys):
    """The CLI prints the error and writes nothing: a store of one unlabelled run of a toy method."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'toy.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("toy")
    run = client.create_run(exp, run_name="toy-seed0", tags={"ssat.kind": "trial", "ssat.table": "main",
                                                              "ssat.status": "FINISHED"}).info.run_id
    for k, v in {"method.name": "toy-at", "data.dataset": "mnist5k", "model.name": "cnn-small"}.items():
        client.log_param(run, k, v)
    client.log_metric(run, "test/best/clean", 50.0)
    capsys.readouterr()  # (MLflow's log of making the store)
    assert tables_main(["--experiment", "toy", "--tracking-uri", uri, "--table", "main",
                        "--out", str(tmp_path / "main.md")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: run 'toy-seed0' (experiment 'toy', id ") and "method 'toy-at' has no label" in err
    assert not (tmp_path / "main.md").exists()
