"""sweeps/trials/study.py: the search's Optuna study in the sweep's folder, driven here as Ray Tune drives its searcher
(suggest, a result per epoch, complete; save and restore), on a real SQLite storage: every trial named and linked,
its intermediate values at the epochs that validated, a restored searcher going on with the same study."""
from __future__ import annotations

import functools
import json
import warnings

import optuna
import pytest

from ssat.config import from_dict
from sweeps.tracking.run_records import trial_key
from sweeps.space import space_function
from sweeps.spec import parse_spec
from sweeps.trials.study import (SweepSearch, check_new_study, dashboard_command, link_mlflow_run, redacted,
                          search_identity, stopped_early, storage_url, study_attrs)
from sweeps.errors import SweepError

optuna.logging.set_verbosity(optuna.logging.WARNING)
SPEC = {"name": "unit", "preset": "mnist5k-ssat-mbi", "epochs": 4,
        "overrides": {"optim.lr_milestones": [3], "optim.lr_factors": [0.1]},
        "search": {"num_samples": 3, "space": {"attack.schedule": {"choice": ["const", "linear"]},
                                               "method.beta": {"float": [0.0, 1.0]}},
                   "confirm": {"top_k": 1, "seeds": [9]}}}


def searcher(url: str, spec=None) -> SweepSearch:
    spec = spec or parse_spec(SPEC)
    return SweepSearch(space=space_function(spec.search["space"]), metric="val/pgd10", mode="max",
                       sampler=optuna.samplers.TPESampler(seed=0), storage=optuna.storages.RDBStorage(url),
                       study_name="unit", identify=functools.partial(search_identity, base=spec.base, seed=0,
                                                                     sweep="unit"),
                       study_attrs=study_attrs(spec, "sqlite:///mlflow.db"))


def test_the_study_lives_in_the_sweep_folder_unless_an_rdb_is_given(tmp_path):
    assert storage_url(tmp_path) == f"sqlite:///{tmp_path.resolve()}/optuna.db"
    assert storage_url(tmp_path, "postgresql://u:pw@h/optuna") == "postgresql+psycopg2://u:pw@h/optuna"
    assert redacted("postgresql+psycopg2://u:pw@h/optuna") == "postgresql+psycopg2://u:***@h/optuna"
    assert (dashboard_command("sqlite:///x/optuna.db")
            == "optuna-dashboard sqlite:///x/optuna.db --host 127.0.0.1 --port 8080")


def test_trials_are_named_and_linked_and_report_each_validated_epoch(tmp_path):
    url = storage_url(tmp_path)
    s = searcher(url)
    params = s.suggest("tune_a")
    for epoch, result in enumerate([{"val/pgd10": 10.0}, {}, {"val/pgd10": 30.0}], 1):  # epoch 2 did not validate
        s.on_trial_result("tune_a", {"epoch": epoch, **result})
    s.on_trial_result("tune_a", {"epoch": 3, "val/pgd10": 99.0})  # a resumed trial's replay changes nothing
    assert link_mlflow_run(url, "unit", "tune_a", "run123") and not link_mlflow_run(url, "unit", "nobody", "x")
    assert link_mlflow_run(url, "unit", "tune_a", "run123")  # again: nothing to change
    s.on_trial_complete("tune_a", {"epoch": 3, "val/pgd10": 30.0, "val/clean": 80.0, "time/epochs": 3})
    assert not link_mlflow_run(url, "unit", "tune_a", "other")  # a finished trial keeps its attributes
    assert link_mlflow_run(url, "unit", "tune_a", "run123")  # ... and says it holds the run it was linked to
    study = optuna.load_study(study_name="unit", storage=url)
    (t,) = study.trials
    ident = search_identity(params, base=parse_spec(SPEC).base, seed=0, sweep="unit")
    assert ident["name"].endswith(" s0") and ident["label"] in ident["name"]
    h = from_dict(parse_spec(SPEC).base, {**params, "seed": 0}).config_hash()
    assert ident["ssat_key"] == trial_key("unit", h, 0, "search") and ident["label"].endswith(f"#{h[:4]}")
    assert isinstance(t.user_attrs["epoch"], int)
    assert t.user_attrs == {**ident, "tune_trial_id": "tune_a", "mlflow_run_id": "run123", "val/clean": 80.0,
                            "val/pgd10": 30.0, "epoch": 3}
    assert t.intermediate_values == {1: 10.0, 3: 30.0} and t.value == 30.0 and t.state.name == "COMPLETE"
    assert t.params == params
    assert json.loads(study.user_attrs["space"]) == SPEC["search"]["space"]
    assert (study.user_attrs["metric"], study.user_attrs["mode"], study.user_attrs["sweep"]) == ("val/pgd10", "max",
                                                                                                  "unit")


def test_a_restored_searcher_goes_on_with_the_same_study_and_fails_a_trial_tune_never_ran(tmp_path):
    url = storage_url(tmp_path)
    s = searcher(url)
    s.suggest("a")
    s.on_trial_result("a", {"epoch": 1, "val/pgd10": 5.0})
    s.save(str(tmp_path / "searcher.pkl"))  # Tune's last save before the driver stopped
    s.suggest("b")  # asked after it: this searcher state never knew it
    s.suggest("z")  # asked after it too, and finished before the stop: it stays as it ended
    s.on_trial_complete("z", {"epoch": 2, "val/pgd10": 1.0, "time/epochs": 2})
    again = searcher(url)  # the resumed driver's (load_if_exists), then Tune restores the saved state into it
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Optuna warns when told an end without a state or values
        again.restore(str(tmp_path / "searcher.pkl"))
    again.on_trial_result("a", {"epoch": 2, "val/pgd10": 7.0})
    again.on_trial_complete("a", {"epoch": 2, "val/pgd10": 7.0, "time/epochs": 2})
    again.suggest("c")
    trials = {t.user_attrs["tune_trial_id"]: t for t in optuna.load_study(study_name="unit", storage=url).trials}
    assert set(trials) == {"a", "b", "c", "z"}  # one study trial per Tune trial: a was not asked again
    assert trials["a"].intermediate_values == {1: 5.0, 2: 7.0} and trials["a"].state.name == "COMPLETE"
    assert trials["b"].state.name == "FAIL"
    assert trials["b"].user_attrs["never_ran"] == "handed out just before the driver stopped"
    assert (trials["z"].state.name, trials["z"].value) == ("COMPLETE", 1.0)
    assert trials["c"].state.name == "RUNNING"


def test_a_result_that_only_reaches_the_end_hook_is_still_an_intermediate_value(tmp_path):
    """Tune hands the result that a scheduler's STOP ends a trial with (ASHA at max_t) to on_trial_complete only."""
    s = searcher(storage_url(tmp_path))
    s.suggest("a")
    s.on_trial_result("a", {"epoch": 1, "val/pgd10": 4.0})
    s.on_trial_complete("a", {"epoch": 2, "val/pgd10": 6.0, "time/epochs": 2})
    (t,) = s._ot_study.trials
    assert (t.intermediate_values, t.value, t.state.name) == ({1: 4.0, 2: 6.0}, 6.0, "COMPLETE")


def test_a_trial_the_scheduler_stopped_with_a_value_ends_pruned_at_its_last_report(tmp_path):
    """ASHA stopped it at its rung (epoch 2 of 3): PRUNED, not COMPLETE, its value the rung's report."""
    s = searcher(storage_url(tmp_path))
    s.suggest("cut")
    s.on_trial_result("cut", {"epoch": 1, "val/pgd10": 4.0})
    s.on_trial_complete("cut", {"epoch": 2, "val/pgd10": 6.0, "val/clean": 50.0})
    s.on_trial_complete("cut", {"epoch": 2, "val/pgd10": 6.0})  # told twice: nothing changes
    s.suggest("diverged")
    s.on_trial_complete("diverged", {"epoch": 1, "val/pgd10": float("nan"), "failed_reason": "loss is nan"})
    t, d = s._ot_study.trials
    assert (t.state.name, t.value, t.intermediate_values, t.user_attrs["epoch"]) == ("PRUNED", 6.0, {1: 4.0, 2: 6.0}, 2)
    assert (d.state.name, d.user_attrs["failed_reason"]) == ("FAIL", "loss is nan")
    s.suggest("long")
    s.on_trial_complete("long", {"epoch": 1, "val/pgd10": float("nan"), "failed_reason": "x" * 600})
    assert s._ot_study.trials[-1].user_attrs["failed_reason"] == "x" * 500  # Optuna's attribute, kept short
    assert not stopped_early({"epoch": 1, "failed_reason": "loss is nan"})
    assert not stopped_early({"epoch": 2, "time/epochs": 2}) and stopped_early({"epoch": 1})


def test_a_trial_without_a_value_ends_pruned_and_one_that_errored_fails(tmp_path):
    s = searcher(storage_url(tmp_path))
    s.suggest("early")
    s.on_trial_result("early", {"epoch": 1, "val/pgd10": 3.0})
    s.on_trial_complete("early", {"epoch": 1})  # stopped by ASHA before it validated again: no value
    s.suggest("err")
    s.on_trial_complete("err", None, error=True)
    states = {t.user_attrs["tune_trial_id"]: t.state.name for t in s._ot_study.trials}
    assert states == {"early": "PRUNED", "err": "FAIL"}


def test_a_new_search_refuses_a_storage_that_holds_its_study_or_cannot_be_opened(tmp_path):
    url = storage_url(tmp_path)
    check_new_study(url, "unit")  # no file yet: nothing to check, and nothing made
    assert not (tmp_path / "optuna.db").exists()
    searcher(url)
    check_new_study(url, "other")
    with pytest.raises(SweepError) as held:
        check_new_study(url, "unit")
    assert str(held.value) == (f"the Optuna storage {url} already holds a study named unit: give this sweep another "
                               "--name, or delete that study first "
                               "(optuna delete-study --study-name unit --storage URL)")
    with pytest.raises(SweepError) as bad:
        check_new_study("postgresql+psycopg2://u:pw@127.0.0.1:1/x", "unit")
    assert str(bad.value).startswith("--optuna-storage postgresql+psycopg2://u:***@127.0.0.1:1/x: cannot be opened "
                                     "(OperationalError: (psycopg2.OperationalError) connection to server at")
    assert "\n" not in str(bad.value)
    with pytest.raises(SweepError, match=r"--optuna-storage postgresql\+psycopg2://u:\*\*\*@127.0.0.1:1/x: cannot be "
                                         r"opened"):
        check_new_study("postgresql+psycopg2://u:pw@127.0.0.1:1/x", "unit")


def test_identity_of_a_config_that_does_not_build_is_empty():
    assert search_identity({"method.beta": "x"}, base=parse_spec(SPEC).base, seed=0, sweep="unit") == {}


def test_a_multi_objective_study_or_an_unknown_trial_gets_no_intermediate_value(tmp_path):
    """Optuna keeps no intermediate values of a multi-objective study (report raises there); a result of a trial
    this searcher never handed out (a driver's restored state) is passed over."""
    spec = parse_spec({**SPEC, "metric": ["val/clean", "val/pgd10"], "mode": ["max", "max"]})
    s = SweepSearch(space=space_function(spec.search["space"]), metric=["val/clean", "val/pgd10"],
                    mode=["max", "max"], sampler=optuna.samplers.TPESampler(seed=0),
                    storage=optuna.storages.RDBStorage(storage_url(tmp_path)), study_name="multi",
                    identify=functools.partial(search_identity, base=spec.base, seed=0, sweep="multi"),
                    study_attrs=study_attrs(spec, "sqlite:///mlflow.db"))
    s.suggest("m")
    s.on_trial_result("m", {"epoch": 1, "val/clean": 50.0, "val/pgd10": 5.0})
    s.on_trial_result("nobody", {"epoch": 1, "val/clean": 50.0, "val/pgd10": 5.0})
    assert s._ot_study.trials[0].intermediate_values == {}
    (tmp_path / "one").mkdir()
    one = searcher(storage_url(tmp_path / "one"))
    one.on_trial_result("nobody", {"epoch": 1, "val/pgd10": 5.0})
    assert one._ot_study.trials == []


def test_the_study_records_its_sweeps_metric_mode_and_store():
    one = study_attrs(parse_spec(SPEC), "sqlite:///m.db")
    assert {k: v for k, v in one.items() if k != "space"} == {"metric": "val/pgd10", "mode": "max", "sweep": "unit",
                                                               "tracking_uri": "sqlite:///m.db"}
    two = study_attrs(parse_spec({**SPEC, "metric": ["val/clean", "val/pgd10"], "mode": ["max", "min"]}), "u")
    assert (two["metric"], two["mode"]) == (["val/clean", "val/pgd10"], ["max", "min"])


def test_a_storage_that_fails_says_its_first_line_cut_to_200_characters(monkeypatch, tmp_path):
    def fail(url):
        raise RuntimeError("x" * 300 + "\nsecond line")
    monkeypatch.setattr(optuna.study, "get_all_study_names", fail)
    with pytest.raises(SweepError) as err:
        check_new_study("postgresql+psycopg2://u@h/x", "unit")
    assert str(err.value) == (f"--optuna-storage postgresql+psycopg2://u@h/x: cannot be opened "
                              f"(RuntimeError: {'x' * 200})")


@pytest.mark.parametrize("given", [None, "FINISHED"])
def test_no_sample_names_no_trial(monkeypatch, tmp_path, given):
    """OptunaSearch hands out no sample (None: none yet; Searcher.FINISHED: the search is done): nothing is named."""
    from ray.tune.search.optuna import OptunaSearch
    s = searcher(storage_url(tmp_path))
    monkeypatch.setattr(OptunaSearch, "suggest", lambda self, trial_id: given)
    assert s.suggest("x") == given and s._ot_study.trials == []
