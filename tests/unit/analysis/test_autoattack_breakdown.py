"""AutoAttack attack by attack, read back from a real MLflow store: the chain per run and the masking hint."""
import pytest
from mlflow.tracking import MlflowClient

from analysis.autoattack_breakdown import breakdown, main, render
from devtools.servers import sqlite_store
from analysis.collect import load_mlflow_runs


HONEST_AND_MASKED = {"honest": [60.0, 55.5, 55.5, 55.5], "masked": [70.0, 68.0, 68.0, 41.0]}


def _store(tmp_path, chains=HONEST_AND_MASKED):
    uri = sqlite_store(tmp_path)
    c = MlflowClient(uri)
    exp = c.create_experiment("aa")
    for name, chain in chains.items():
        run = c.create_run(exp, run_name=name, tags={"ssat.kind": "trial", "ssat.row": name, "ssat.seed": "0"})
        for a, v in zip(("apgd-ce", "apgd-t", "fab-t", "square"), chain):
            c.log_metric(run.info.run_id, f"test/best/autoattack/{a}", v)
        c.log_metric(run.info.run_id, "test/best/autoattack", chain[-1])
    old = c.create_run(exp, run_name="old", tags={"ssat.kind": "trial"})  # final number only: left out
    c.log_metric(old.info.run_id, "test/best/autoattack", 50.0)
    return uri


def test_breakdown_per_run_and_the_square_drop(tmp_path, capsys):
    uri = _store(tmp_path)
    table = breakdown(load_mlflow_runs(["aa"], uri))
    assert list(table.run_name) == ["honest", "masked"]
    assert (table.set_index("run_name").loc["masked", ["apgd-ce", "square", "square_drop"]].tolist()
            == [70.0, 41.0, 27.0])
    assert table.set_index("run_name").loc["honest", "square_drop"] == 0.0
    md = render(table)
    assert md.splitlines()[:2] == ["| run | row | seed | APGD-CE | APGD-T | FAB-T | Square | Square drop |",
                                   "|---|---|---|---|---|---|---|---|"]
    assert "| masked | masked | 0 | 70.00 | 68.00 | 68.00 | 41.00 | 27.00 (masking?) |" in md
    assert "| honest | honest | 0 | 60.00 | 55.50 | 55.50 | 55.50 | 0.00 |" in md
    assert main(["--experiment", "aa", "--tracking-uri", uri]) == 0
    out = capsys.readouterr()
    assert "masked" in out.out
    assert out.err.splitlines()[-1] == ("1 of 2 run(s): Square found adversarial examples the gradient attacks "
                                        "missed (gradient masking?)")  # after MLflow's own lines
    assert out.out.startswith("| run |")  # Markdown by default
    assert main(["--experiment", "aa", "--tracking-uri", uri, "--format", "csv", "--out",
                 str(tmp_path / "aa.csv")]) == 0
    assert capsys.readouterr().out == ""  # written to --out, not printed
    assert (tmp_path / "aa.csv").read_text() == ("run_name,row,seed,apgd-ce,apgd-t,fab-t,square,square_drop\n"
                                                 "honest,honest,0,60.00,55.50,55.50,55.50,0.00\n"
                                                 "masked,masked,0,70.00,68.00,68.00,41.00,27.00\n\n")
    assert main(["--experiment", "aa", "--tracking-uri", uri, "--checkpoint", "last"]) == 2
    assert ("no run holds AutoAttack's per-attack results at checkpoint 'last' (runs trained before they were "
            "recorded hold only the final number)") in capsys.readouterr().err


def test_the_command_counts_a_square_drop_under_one_point(tmp_path, capsys):
    uri = _store(tmp_path, {"slight": [50.0, 49.0, 49.0, 48.5], "honest": [60.0, 55.5, 55.5, 55.5]})
    assert main(["--experiment", "aa", "--tracking-uri", uri]) == 0
    assert capsys.readouterr().err.splitlines()[-1] == ("1 of 2 run(s): Square found adversarial examples the "
                                                        "gradient attacks missed (gradient masking?)")


def test_the_command_line_names_itself_and_refuses_an_unknown_checkpoint(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m analysis.autoattack_breakdown ")
    words = " ".join(out.split())  # argparse wraps the description: the docstring's first line, whole, and no more
    assert ("AutoAttack, attack by attack: the robust accuracy after APGD-CE, APGD-T, FAB-T and Square for every run "
            "that options:") in words
    assert "--out OUT write here instead of printing" in words
    with pytest.raises(SystemExit) as exc:
        main(["--experiment", "x", "--checkpoint", "middle"])
    assert exc.value.code == 2
    assert "--checkpoint: invalid choice: 'middle' (choose from 'best', 'last')" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["--experiment", "x", "--format", "json"])
    assert exc.value.code == 2
    assert "--format: invalid choice: 'json' (choose from 'md', 'csv')" in capsys.readouterr().err


def test_breakdown_of_hand_made_runs_empty_or_unsorted():
    import pandas as pd

    columns = ["run_name", "row", "seed", "apgd-ce", "apgd-t", "fab-t", "square", "square_drop"]
    assert list(breakdown(pd.DataFrame()).columns) == columns
    assert list(breakdown(pd.DataFrame({"run_name": ["a"]})).columns) == columns  # no AutoAttack results
    chain = {f"metric.test/best/autoattack/{a}": [50, 40, 30] for a in ("apgd-ce", "apgd-t", "fab-t", "square")}
    runs = pd.DataFrame({"run_name": ["c", "b", "a"], "meta.row": [None, "r", "r"], "meta.seed": [0, 1, 0],
                         **chain})
    table = breakdown(runs)
    assert list(table.run_name) == ["a", "b", "c"]  # by row and seed; a run without a row last
    assert list(table.index) == [0, 1, 2] and table["apgd-ce"].dtype == float


def test_any_drop_at_square_is_flagged():
    import pandas as pd

    row = {"run_name": "r", "row": "x", "seed": 0, "apgd-ce": 50.0, "apgd-t": 49.0, "fab-t": 49.0, "square": 48.5,
           "square_drop": 0.5}
    assert render(pd.DataFrame([row])).splitlines()[-1] == ("| r | x | 0 | 50.00 | 49.00 | 49.00 | 48.50 | "
                                                             "0.50 (masking?) |")
