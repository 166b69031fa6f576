"""analysis.importance on the Optuna study a search keeps (tests/unit/search_study.py builds one as the contract says,
in SQLite), found through the tags of the sweep's parent run in a real MLflow store, or given with --storage/--study.
"""
from __future__ import annotations

import json
import math
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import matplotlib
import matplotlib.colors
import optuna
import pandas as pd
import pytest

from analysis import importance as imp
from analysis.importance import importance, main
from tests.unit.search_study import N_FULL, N_STOPPED, NAME, SPACE, add_trial, search_study, sweep_run

STATES = optuna.trial.TrialState
FAILED, NEVER_RAN = N_FULL + N_STOPPED, N_FULL + N_STOPPED + 1


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    """(the study's storage URL, {trial number: (sampled, {epoch: val/pgd10})}); read only by the tests."""
    root = tmp_path_factory.mktemp("study")
    url = f"sqlite:///{root / 'optuna.db'}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return url, search_study(url)


@pytest.fixture
def copy(kept, tmp_path):
    """A copy of the kept study this test may add to: its URL."""
    shutil.copy(kept[0][len("sqlite:///"):], tmp_path / "copy.db")
    return f"sqlite:///{tmp_path / 'copy.db'}"


def png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_reads_the_kept_study_at_the_common_epoch_and_ranks_beta_first(kept, store, tmp_path):
    url, truth = kept
    sweep_run(store, optuna_storage=url, optuna_study=NAME)
    lines = []
    r = importance(NAME, store, out_dir=tmp_path / "out" / "deep", log=lines.append)
    # every trial that ran reached epoch 2 (ASHA's rung), the full ones 4: E = 2; the failed trial has no value; the
    # one never run is no trial; PRUNED trials (no value of their own) count by their intermediate values
    assert r.epoch == 2 and r.trials == list(range(40)) and r.left_out == {FAILED: "no value at any epoch"}
    assert (r.storage, r.study, r.metric, r.warnings) == (url, NAME, "val/pgd10", [])
    assert lines[0] == f"{NAME}: val/pgd10 (max) at epoch 2, 40 of 41 search trials (study '{NAME}' in {url})"
    assert lines[1].startswith(f"  left out trial {FAILED} (") and lines[1].endswith(" s0): no value at any epoch")
    t = r.table.set_index("parameter")
    assert r.table["parameter"][0] == "method.beta" and t.loc["method.beta", "importance"] > 0.6
    unconditional = ["attack.schedule", "method.rho0", "method.rho_double_epoch", "method.beta", "method.tau"]
    assert t.loc[unconditional, "importance"].sum() == pytest.approx(1.0)
    n_t = sum("attack.t" in s for s, _ in truth.values())
    n_gamma = sum("attack.gamma" in s for s, _ in truth.values())
    assert t.loc[["attack.t", "attack.gamma", "method.beta"], "active"].tolist() == [n_t, n_gamma, 40]
    assert math.isnan(t.loc["attack.t", "importance"]) and math.isnan(t.loc["attack.gamma", "importance"])
    assert t.loc["attack.gamma", "where_active"] > 0.4 > 0.1 > t.loc["attack.t", "where_active"]
    assert math.isnan(t.loc["method.beta", "where_active"])
    assert t.loc["attack.gamma", "when"] == "attack.schedule in ['curious']"
    # read, never written: the storage holds the one study with its 42 trials, nothing was made beside the plot
    assert optuna.study.get_all_study_names(url) == [NAME]
    assert len(optuna.load_study(study_name=NAME, storage=url).trials) == 42
    assert sorted(p.name for p in (tmp_path / "out" / "deep").iterdir()) == ["importance.png"]
    assert r.png == tmp_path / "out" / "deep" / "importance.png"
    assert png_size(r.png) == (1100, 515)  # (5 x 2 panels + 1) x 100 dpi, (1.2 + 0.45 x 7 rows + 0.8) x 100
    assert list(r.table.columns) == ["parameter", "importance", "where_active", "active", "when"]
    assert lines[-1] == f"plot: {r.png}; the study: optuna-dashboard {url}"


def test_each_trial_is_valued_at_the_common_epoch_from_its_intermediate_values(kept):
    url, truth = kept
    study = optuna.load_study(study_name=NAME, storage=url)
    trials, values, epoch, left = imp.scored_trials(study, "val/pgd10", None)
    assert epoch == 2 and values == {n: curve[2] for n, (_, curve) in truth.items()}  # not the full trials' final
    assert [t.number for t in trials] == sorted(truth) and left == {FAILED: "no value at any epoch"}
    trials, values, epoch, left = imp.scored_trials(study, "val/pgd10", 4)
    assert values == {n: curve[4] for n, (_, curve) in truth.items() if 4 in curve} and len(values) == N_FULL
    assert left == {**{n: "stopped at epoch 2" for n in range(N_FULL, FAILED)}, FAILED: "no value at any epoch"}
    scored = imp.epoch_study(trials, values, "max")
    assert [t.value for t in scored.trials] == [truth[t.number][1][4] for t in trials]
    assert [t.params for t in scored.trials] == [truth[t.number][0] for t in trials]  # const trials carry no t
    assert scored.direction == optuna.study.StudyDirection.MAXIMIZE and scored.trials[0].user_attrs["label"]
    assert imp.epoch_study(trials, values, "min").direction == optuna.study.StudyDirection.MINIMIZE


def test_a_conditional_parameter_is_weighed_within_the_trials_where_it_is_active(kept):
    """gamma's share is fANOVA's over the curious trials alone, beside the parameters all of them have (t too)."""
    url, truth = kept
    study = optuna.load_study(study_name=NAME, storage=url)
    trials, values, _, _ = imp.scored_trials(study, "val/pgd10", None)
    table = imp.importance_table(imp.epoch_study(trials, values, "max"), SPACE).set_index("parameter")
    curious = [t for t in trials if t.params["attack.schedule"] == "curious"]
    alone = imp.epoch_study(curious, values, "max")
    expected = imp.fanova(alone, list(SPACE))  # every parameter is active in a curious trial
    assert table.loc["attack.gamma", "where_active"] == pytest.approx(expected["attack.gamma"])
    assert table.loc["attack.gamma", "active"] == len(curious) < len(trials)
    scheduled = [t for t in trials if t.params["attack.schedule"] != "const"]
    expected_t = imp.fanova(imp.epoch_study(scheduled, values, "max"), [k for k in SPACE if k != "attack.gamma"])
    assert table.loc["attack.t", "where_active"] == pytest.approx(expected_t["attack.t"])


def test_epoch_leaves_out_stopped_trials_and_warns_below_30_without_torch_or_ray(kept, store, tmp_path):
    """The CLI in a fresh interpreter: --epoch 4 keeps the 12 trials that got there and lists the others."""
    url, truth = kept
    sweep_run(store, optuna_storage=url, optuna_study=NAME)
    code = ("import sys; from analysis.importance import main; assert main(sys.argv[1:]) == 0; "
            "print('modules', sorted(m for m in ('torch', 'ray', 'ssat', 'sweeps') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, "--experiment", NAME, "--tracking-uri", store, "--epoch", "4",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "modules []" and out.stderr == ""
    assert f"{NAME}: val/pgd10 (max) at epoch 4, 12 of 41 search trials" in out.stdout
    assert "warning: the importance rests on 12 trials (fewer than 30)" in out.stdout
    for n in range(N_FULL, N_FULL + N_STOPPED):
        assert f"  left out trial {n} ({truth_name(url, n)}): stopped at epoch 2\n" in out.stdout
    assert png_size(tmp_path / "importance.png")[0] >= 800


def truth_name(url: str, number: int) -> str:
    return optuna.load_study(study_name=NAME, storage=url).trials[number].user_attrs["name"]


def test_storage_and_study_options_read_a_study_without_mlflow(kept, tmp_path, capsys):
    url, _ = kept
    assert main(["--experiment", "any", "--tracking-uri", "sqlite:////nowhere/mlflow.db", "--storage", url,
                 "--study", NAME, "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(f"any: val/pgd10 (max) at epoch 2, 40 of 41 search trials (study "
                                              f"'{NAME}' in {url})")
    assert imp.find_study("e", None, url) == (url, "e")  # the study defaults to the experiment's name


def test_a_search_from_before_the_study_gets_a_clear_error(store, tmp_path, capsys):
    sweep_run(store)  # a parent run without the study's tags: the search ran before the driver kept it
    assert main(["--experiment", NAME, "--tracking-uri", store, "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"error: experiment '{NAME}': its sweep run names no Optuna study (no tag ssat.optuna_storage): the search ran "
        "before the sweep kept its study (sweeps/trials/study.py), or the sweep is a grid. Re-run the search to read "
        "its importance, or pass --storage URL --study NAME of a study kept elsewhere\n")
    assert list(tmp_path.iterdir()) == [tmp_path / "mlflow.db"]


def test_the_sweep_run_must_name_one_study(store):
    from analysis.collect import load_mlflow_runs

    for runs in (pd.DataFrame({"run_id": ["a"], "meta.kind": ["trial"]}), pd.DataFrame({"run_id": ["a"]})):
        with pytest.raises(imp.ImportanceError) as err:  # trials only, or runs without the kind tag
            imp.study_location(runs, "x")
        assert str(err.value) == ("experiment 'x' has no sweep run (tag ssat.kind=sweep) to name its Optuna study; "
                                  "pass --storage URL --study NAME")
    sweep_run(store, optuna_storage="sqlite:////a/optuna.db", optuna_study=NAME)
    runs = load_mlflow_runs([NAME], store)
    assert imp.study_location(runs, NAME) == ("sqlite:////a/optuna.db", NAME)
    two = runs.assign(**{"meta.optuna_storage": "sqlite:////b/optuna.db"})
    both = pd.concat([runs, two], ignore_index=True)
    with pytest.raises(imp.ImportanceError) as err:
        imp.study_location(both, NAME)
    assert str(err.value) == (f"experiment '{NAME}' has sweep runs of 2 studies ({NAME} in sqlite:////a/optuna.db; "
                              f"{NAME} in sqlite:////b/optuna.db): pass --storage URL --study NAME")
    renamed = runs.assign(**{"meta.optuna_study": "renamed"})  # the study's own name, not the experiment's
    assert imp.study_location(renamed, NAME) == ("sqlite:////a/optuna.db", "renamed")
    unnamed = runs.drop(columns="meta.optuna_study")  # the study's name defaults to the experiment's
    assert imp.study_location(unnamed, "exp") == ("sqlite:////a/optuna.db", "exp")


def test_a_storage_that_cannot_be_read_is_named_and_never_created(kept, tmp_path):
    url, _ = kept
    with pytest.raises(imp.ImportanceError) as err:
        imp.open_study("postgresql+psycopg2://ssat:***@head:5432/optuna", NAME)
    assert str(err.value) == ("the study's storage postgresql+psycopg2://ssat:***@head:5432/optuna is recorded "
                              f"without its password: pass --storage URL (with the password) --study {NAME}")
    gone = tmp_path / "moved" / "optuna.db"
    with pytest.raises(imp.ImportanceError) as err:
        imp.open_study(f"sqlite:///{gone}", NAME)
    assert str(err.value) == (f"no Optuna storage at '{gone}' (study '{NAME}'): the sweep's folder moved or was "
                              "removed; pass --storage sqlite:///PATH/optuna.db of its copy")
    assert not gone.parent.exists()
    with pytest.raises(imp.ImportanceError, match=rf"^the Optuna storage {url} holds no study 'other'; its studies: "
                                                  rf"{NAME}$"):
        imp.open_study(url, "other")
    with pytest.raises(imp.ImportanceError) as err:  # a server that is not there: its password never shown
        imp.open_study("postgresql+psycopg2://ssat:secret@127.0.0.1:1/optuna", NAME)
    assert str(err.value).startswith("the Optuna storage postgresql+psycopg2://ssat:***@127.0.0.1:1/optuna cannot be "
                                     "opened (") and "secret" not in str(err.value)
    (tmp_path / "junk.db").write_text("not a database")
    with pytest.raises(imp.ImportanceError, match=r"^the Optuna storage sqlite:///.*junk\.db cannot be opened \("):
        imp.open_study(f"sqlite:///{tmp_path / 'junk.db'}", NAME)
    assert imp.shown("postgresql://u:secret@h/db") == "postgresql://u:***@h/db" and imp.shown("x::") == "x::"
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    optuna.storages.RDBStorage(empty)  # the tables, no study
    with pytest.raises(imp.ImportanceError, match=rf"^the Optuna storage {empty} holds no study 'x'; its studies: "
                                                  "none$"):
        imp.open_study(empty, "x")
    for name in ("b", "a"):
        optuna.create_study(storage=empty, study_name=name)
    with pytest.raises(imp.ImportanceError, match=rf"^the Optuna storage {empty} holds no study 'x'; its studies: "
                                                  "a, b$"):
        imp.open_study(empty, "x")


def test_bad_input_names_what_exists(kept, tmp_path, capsys):
    url, _ = kept
    given = ["--experiment", NAME, "--storage", url, "--out", str(tmp_path)]
    assert main([*given, "--epoch", "7"]) == 2
    assert capsys.readouterr().err == "error: --epoch 7: no trial has a value there; the trials reached epochs 2 to 4\n"
    assert main([*given, "--epoch", "0"]) == 2
    assert "--epoch 0: no trial has a value there" in capsys.readouterr().err
    assert main([*given, "--metric", "val/pgd20"]) == 2
    assert capsys.readouterr().err == (f"error: metric 'val/pgd20' is not in study '{NAME}'; it holds: val/pgd10, "
                                       "val/clean\n")
    assert list(tmp_path.iterdir()) == []


def test_a_final_attribute_is_read_at_each_trials_last_report(kept):
    """val/clean is no objective: each trial's last report holds it, at the epoch that report records."""
    url, truth = kept
    study = optuna.load_study(study_name=NAME, storage=url)
    assert imp.objective(study, "val/clean", None) == ("val/clean", "max")
    assert imp.objective(study, None, "min") == ("val/pgd10", "min")
    trials, values, epoch, left = imp.scored_trials(study, "val/clean", None)
    assert epoch == 2 and len(trials) == N_STOPPED  # the full trials reported last at epoch 4
    assert values == {t.number: t.user_attrs["val/clean"] for t in trials}
    assert left == {**{n: "no value at epoch 2" for n in range(N_FULL)}, FAILED: "no value at any epoch"}
    with pytest.raises(imp.ImportanceError, match=r"^mode 'up'; allowed: max, min$"):
        imp.objective(study, None, "up")


def two_objective_study(url: str) -> optuna.Study:
    """A study of the contract with two objectives (no intermediate values: Optuna keeps none), one trial running."""
    study = optuna.create_study(storage=url, study_name="two", directions=["maximize", "minimize"])
    study.set_user_attr("space", json.dumps({"method.beta": {"float": [0.0, 1.0]}}))
    study.set_user_attr("metric", ["val/pgd10", "time/epoch"])
    dist = {"method.beta": optuna.distributions.FloatDistribution(0.0, 1.0)}
    for i in range(5):
        study.add_trial(optuna.trial.create_trial(params={"method.beta": i / 5}, distributions=dist,
                                                  values=[50.0 + i, 10.0 - i],
                                                  user_attrs={"epoch": 3, "name": f"b{i}"}))
    study.add_trial(optuna.trial.create_trial(params={"method.beta": 0.9}, distributions=dist, state=STATES.RUNNING,
                                              user_attrs={"name": "late"}))
    return study


def test_a_multi_objective_study_is_valued_at_each_trials_last_report(tmp_path):
    url = f"sqlite:///{tmp_path / 'two.db'}"
    study = two_objective_study(url)
    assert imp.study_metrics(study) == ["val/pgd10", "time/epoch"]
    assert imp.objective(study, None, None) == ("val/pgd10", "max")
    assert imp.objective(study, "time/epoch", None) == ("time/epoch", "min")
    trials, values, epoch, left = imp.scored_trials(study, "time/epoch", None)
    assert epoch == 3 and values == {i: 10.0 - i for i in range(5)} and left == {5: "still running"}
    r = importance("two", storage=url, study="two", out_dir=tmp_path, metric="time/epoch", log=lambda _: None)
    assert (r.epoch, r.trials, r.left_out) == (3, [0, 1, 2, 3, 4], {5: "still running"})
    assert r.table["parameter"].tolist() == ["method.beta"] and r.table["importance"][0] == pytest.approx(1.0)


def test_a_running_trial_does_not_bound_the_epoch(copy):
    study = optuna.load_study(study_name=NAME, storage=copy)
    add_trial(study, 99, {"attack.schedule": "const", "method.rho0": 0.1, "method.rho_double_epoch": None,
                          "method.beta": 0.5, "method.tau": 1.0}, {1: 40.0}, STATES.RUNNING)
    _, values, epoch, left = imp.scored_trials(study, "val/pgd10", None)
    assert epoch == 2 and len(values) == 40 and left[42] == "still running"
    assert imp.trial_name(study.trials[42]).endswith("#0063 s0")


def test_a_study_without_its_space_is_refused_and_a_trial_is_named_by_what_it_has(tmp_path):
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'bare.db'}", study_name="bare")
    with pytest.raises(imp.ImportanceError) as err:
        imp.study_space(study)
    assert str(err.value) == ("study 'bare' has no `space` attribute: it was not kept by the sweep driver "
                              "(sweeps/trials/study.py)")
    assert imp.study_metrics(study) == ["objective 0"]
    bare = optuna.trial.create_trial(value=1.0)
    assert imp.trial_name(bare) == f"trial {bare.number}"
    assert imp.trial_name(optuna.trial.create_trial(value=1.0, user_attrs={"label": "linear #ab12"})) == "linear #ab12"
    with pytest.raises(imp.ImportanceError, match="^no trial of the study has a value of the metric at any epoch$"):
        imp.common_epoch({0: {}, 1: {}}, None)


def test_optuna_is_quiet_inside_and_as_verbose_as_before_after():
    optuna.logging.set_verbosity(optuna.logging.INFO)
    with imp.quiet():
        assert optuna.logging.get_verbosity() == optuna.logging.WARNING
    assert optuna.logging.get_verbosity() == optuna.logging.INFO
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_the_help_names_every_option_with_its_metavar_and_default(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for phrase in [
            "usage: python -m analysis.importance [-h] --experiment NAME [--tracking-uri URI] [--storage URL] "
            "[--study NAME] [--epoch E] [--metric KEY] [--mode {max,min}] [--out DIR]",
            "Which settings matter: hyperparameter importance of a search, from the Optuna study the sweep kept. "
            "options:",
            "--experiment NAME the MLflow experiment of the search",
            "--tracking-uri URI MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else MLflow's default ./mlflow.db; "
            "a local store that does not exist is an error, never created)",
            "--storage URL the study's Optuna storage (default: the sweep run's tag ssat.optuna_storage; give it for a "
            "URL that needs its password)",
            "--study NAME the study in --storage (default: the experiment)",
            "--epoch E compare every trial at this epoch (default: the largest epoch all trials reached)",
            "--metric KEY objective (default: the study's first metric)",
            "--mode {max,min} direction (default: the study's, max otherwise)",
            "--out DIR folder for importance.png (default: importance/NAME)",
            "--out DIR folder for importance.png (default: importance/NAME) The sweep driver keeps each search's "
            "Optuna study on disk"]:
        assert phrase in text, phrase
    with pytest.raises(SystemExit) as done:
        main([])
    assert done.value.code == 2 and "the following arguments are required: --experiment" in capsys.readouterr().err


def test_the_options_reach_importance(monkeypatch):
    seen = {}
    monkeypatch.setattr(imp, "importance", lambda *args, **kwargs: seen.update(args=args, kwargs=kwargs))
    assert main(["--experiment", "e", "--tracking-uri", "u", "--epoch", "3", "--metric", "m", "--mode", "min",
                 "--out", "d", "--storage", "s", "--study", "n"]) == 0
    assert seen == {"args": ("e", "u", 3, "m", "min", "d"), "kwargs": {"storage": "s", "study": "n"}}
    assert main(["--experiment", "e"]) == 0
    assert seen == {"args": ("e", None, None, None, None, None), "kwargs": {"storage": None, "study": None}}
    monkeypatch.setattr(imp, "importance", lambda *a, **k: (_ for _ in ()).throw(LookupError("gone")))
    assert main(["--experiment", "e"]) == 2


def test_the_table_text_and_the_plot_show_both_rankings_apart(kept):
    url, _ = kept
    study = optuna.load_study(study_name=NAME, storage=url)
    trials, values, _, _ = imp.scored_trials(study, "val/pgd10", None)
    table = imp.importance_table(imp.epoch_study(trials, values, "max"), SPACE)
    t = table.set_index("parameter")
    text = imp.render_table(table, 40).splitlines()
    assert text[0] == f"{'parameter':<23}  importance  where active  active in  (when)"
    assert text[1] == f"{'method.beta':<23}  {t.loc['method.beta', 'importance']:>10.3f}  {'-':>12}   40 of 40"
    gamma = t.loc["attack.gamma"]
    assert f"{'attack.gamma':<23}  {'-':>10}  {gamma['where_active']:>12.3f}  {gamma['active']:>3} of 40   (attack." \
           "schedule in ['curious'])" in text
    assert imp.rule_text(table, 40) == (
        "importance: fANOVA (Optuna, seed 0), shares of the explained variance summing to 1 over the unconditional "
        "parameters, on all 40 trials.\nconditional parameters (attack.gamma, attack.t) are not in that ranking: each "
        "is weighed only within the trials where it is active ('where active', shares over the parameters active in "
        "all of those trials); over all trials its effect can show only in its parent's share.")
    fig = imp.importance_figure(table, "title", "caption")
    every, where = fig.axes
    assert (every.get_title(), where.get_title()) == ("all trials (unconditional parameters)",
                                                      "where active (conditional parameters)")
    plain = table[table["when"] == ""].iloc[::-1]
    assert [x.get_text() for x in every.get_yticklabels()] == list(plain["parameter"])
    assert [p.get_width() for p in every.patches] == pytest.approx(list(plain["importance"]))
    cond = table[table["when"] != ""].iloc[::-1]
    assert [x.get_text() for x in where.get_yticklabels()] == [f"{p} (n={n})" for p, n in
                                                              zip(cond["parameter"], cond["active"])]
    assert [p.get_width() for p in where.patches] == pytest.approx(list(cond["where_active"]))
    assert every.get_xlim() == where.get_xlim() == (0, 1)
    assert (every.get_xlabel(), where.get_xlabel()) == ("fANOVA importance (sums to 1)",
                                                        "share within its active trials")
    assert tuple(fig.get_size_inches()) == pytest.approx((11, 1.2 + 0.45 * 7 + 0.8))
    assert fig.get_suptitle() == "title" and [x.get_text() for x in fig.texts][-1] == "caption"
    one = imp.importance_figure(table[table["when"] == ""], "t", "c")
    assert len(one.axes) == 1 and tuple(one.get_size_inches()) == pytest.approx((6, 1.2 + 0.45 * 5 + 0.8))


def test_the_default_folder_the_mode_and_the_warnings_edge(kept, tmp_path, monkeypatch):
    url, _ = kept
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(imp, "MIN_TRIALS", 40)  # exactly 40 trials at epoch 2: enough
    lines = []
    r = importance(NAME, storage=url, mode="min", log=lines.append)
    assert r.png == Path("importance") / NAME / "importance.png" and (tmp_path / r.png).exists()
    assert r.warnings == [] and lines[0].startswith(f"{NAME}: val/pgd10 (min) at epoch 2, 40 of 41")
    monkeypatch.setattr(imp, "MIN_TRIALS", 41)
    r = importance(NAME, storage=url, out_dir=tmp_path / "x", log=lambda _: None)
    assert r.warnings == ["warning: the importance rests on 40 trials (fewer than 41); read the ranking as a hint, "
                          "not a finding"]


def test_two_trials_are_enough_for_a_share_and_a_missing_one_is_a_bar_of_0(tmp_path):
    """fANOVA from 2 trials on (over all of them, and within the trials where a parameter is active)."""
    study = optuna.create_study(direction="maximize")
    dists = {"s": optuna.distributions.CategoricalDistribution(["a", "b"]),
             "x": optuna.distributions.FloatDistribution(0.0, 1.0), "g": optuna.distributions.FloatDistribution(0, 1)}
    for s, x, g, v in (("a", 0.1, 0.2, 1.0), ("b", 0.9, 0.8, 2.0), ("a", 0.5, None, 3.0)):
        params = {"s": s, "x": x, **({"g": g} if g is not None else {})}
        study.add_trial(optuna.trial.create_trial(params=params, distributions={k: dists[k] for k in params}, value=v))
    space = {"s": {"choice": ["a", "b"]}, "x": {"float": [0, 1]}, "g": {"float": [0, 1], "when": {"x": [0.1, 0.9]}},
             "h": {"float": [0, 1], "when": {"s": ["c"]}}}
    t = imp.importance_table(study, space).set_index("parameter")
    assert t.loc[["s", "x"], "importance"].sum() == pytest.approx(1.0)
    assert t.loc["g", "active"] == 2 and not math.isnan(t.loc["g", "where_active"])  # 2 trials have g
    assert t.loc["h", "active"] == 0 and math.isnan(t.loc["h", "where_active"])
    one = optuna.create_study()
    one.add_trials(study.trials[:1])
    alone = imp.importance_table(one, space)
    assert alone["importance"].isna().all()  # one trial: no share, a "-" in the text
    assert imp.render_table(alone, 1).splitlines()[1] == "s                   -             -    1 of 1"
    two = optuna.create_study()
    two.add_trials(study.trials[:2])
    assert imp.importance_table(two, space).set_index("parameter").loc[["s", "x"], "importance"].sum() == \
        pytest.approx(1.0)
    with matplotlib.rc_context({"font.size": 12}):  # the sizes are the figure's own, not the caller's defaults
        fig = imp.importance_figure(t.reset_index(), "t", "c")
    assert [p.get_width() for p in fig.axes[1].patches] == [0.0, pytest.approx(t.loc["g", "where_active"])]  # h, g
    assert [p.get_facecolor() for p in (fig.axes[0].patches[0], fig.axes[1].patches[0])] == [
        matplotlib.colors.to_rgba("tab:blue"), matplotlib.colors.to_rgba("tab:orange")]
    assert fig.texts[-1].get_fontsize() == 8 and fig._suptitle.get_fontsize() == 11
    assert fig.texts[-1].get_wrap() and fig.texts[-1].get_position() == (0.01, 0.01)
    assert {ax.title.get_fontsize() for ax in fig.axes} == {10}
    for ax in fig.axes:  # inside the rectangle tight_layout was given: room for the caption and the title
        box = ax.get_position()
        assert box.y0 >= 0.08 and box.y1 <= 0.95 and box.x1 <= 1
