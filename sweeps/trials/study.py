"""A search's Optuna study, kept while the search runs and after it.

    <sweep dir>/optuna.db      the study (SQLite; or the RDB URL of `run --optuna-storage`), named after the sweep

Ray Tune's `OptunaSearch` samples every search trial from this study and tells it each trial's end; `SweepSearch`
adds what a person reading the study needs: each epoch's value of the spec's metric as an intermediate value (at
the epoch, where validation ran), and on each trial the user attributes that link it to the rest of the sweep:

    name, label      the trial's one name and its configuration's label (sweeps.tracking.run_records.trial_name)
    ssat_key         the key of its MLflow run (tag `ssat.key`)
    tune_trial_id    Ray Tune's id of the trial
    mlflow_run_id    its MLflow run, once the run is in the store (set by the driver's TrackingCallback)
    val/clean, val/pgd10, epoch   its last report's validation accuracies and epoch, when it ended

A trial the scheduler (ASHA) stopped before its last epoch ends PRUNED (Optuna takes its last intermediate value as
its value), one that ran all its epochs COMPLETE, one that errored or diverged FAIL.

and on the study: the spec's search space (`space`, the YAML mapping as JSON, with `when`), `metric`, `mode`, the
sweep's name and tracking store. A resumed search goes on with the same study (Tune saves and restores the
searcher, study included); a trial the study handed out that Tune never ran (asked just before the driver
stopped) ends FAIL with `never_ran`, so the study holds each trial that ran once. optuna-dashboard opens it while
the search runs (`dashboard_command`); `analysis.importance` and `analysis.search_figures` read it afterwards.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import optuna
from ray.tune.search.optuna import OptunaSearch

from ssat.config import ConfigError, from_dict

from ..tracking.run_records import sampled_label, trial_key, trial_name

STUDY_FILE = "optuna.db"
FINAL_ATTRS = ("val/clean", "val/pgd10", "epoch")  # of a trial's last report, on its study trial
DASHBOARD_PORT = 8080


def storage_url(sweep_dir: Path, given: str | None = None) -> str:
    """The study's storage: `given` (an RDB URL such as the cluster's PostgreSQL, its own database: MLflow's tables
    share names with Optuna's), else SQLite in the sweep's folder."""
    if given:
        from analysis.record import with_pg_driver

        return with_pg_driver(given)
    return f"sqlite:///{Path(sweep_dir).resolve() / STUDY_FILE}"


def check_new_study(url: str, name: str) -> None:
    """Before a search starts: its storage opens, and holds no study of its name (an RDB shared by several sweeps:
    Ray's OptunaSearch would add this search's trials to that study)."""
    from ..errors import SweepError

    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists():
        return  # made with the sweep's folder
    try:
        names = optuna.study.get_all_study_names(url)
    except Exception as exc:  # noqa: BLE001 - any driver or connection error: say it with the option
        raise SweepError(f"--optuna-storage {redacted(url)}: cannot be opened ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:200]})") from None
    if name in names:
        raise SweepError(f"the Optuna storage {redacted(url)} already holds a study named {name}: give this sweep "
                         f"another --name, or delete that study first (optuna delete-study --study-name {name} "
                         f"--storage URL)")


def redacted(url: str) -> str:
    """The URL without its password (what a tag or a message may show)."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy reads: nothing to hide in it
        return url


def dashboard_command(url: str) -> str:
    return f"optuna-dashboard {url} --host 127.0.0.1 --port {DASHBOARD_PORT}"


def search_identity(sampled: dict, *, base: dict, seed: int, sweep: str) -> dict:
    """What a search trial of these sampled values is called (its name, label and MLflow key), as its run record
    says (sweeps.tracking.run_records.trial_record); {} when its config does not build (the trial fails and says
    why)."""
    try:
        h = from_dict(base, {**sampled, "seed": seed}).config_hash()
    except ConfigError:
        return {}
    label = sampled_label(sampled, h)
    return {"name": trial_name(label, seed), "label": label, "ssat_key": trial_key(sweep, h, seed, "search")}


def stopped_early(result: dict) -> bool:
    """A trial's last result is not its last epoch's (which carries `time/epochs`) nor a divergence's
    (`failed_reason`): Tune completed it early only because the scheduler stopped it."""
    return "time/epochs" not in result and "failed_reason" not in result


class SweepSearch(OptunaSearch):
    """OptunaSearch on the sweep's persisted study: intermediate values by epoch, trials named and linked.

    `identify(sampled) -> {user attribute: value}` names a trial from its sampled values (a module-level function
    bound with functools.partial, like the space: Tune pickles the searcher)."""

    def __init__(self, *, identify, study_attrs: dict, **kwargs):
        super().__init__(**kwargs)
        self._identify = identify
        for key, value in study_attrs.items():
            self._ot_study.set_user_attr(key, value)

    def suggest(self, trial_id: str):
        params = super().suggest(trial_id)
        if params is not None and trial_id in self._ot_trials:
            ot_trial = self._ot_trials[trial_id]
            for key, value in {**self._identify(params), "tune_trial_id": trial_id}.items():
                ot_trial.set_user_attr(key, value)
        return params

    def on_trial_result(self, trial_id: str, result: dict):
        """The metric at its epoch (an epoch without validation reports none). A resumed trial replays the epochs
        after its checkpoint with the same values: reporting a step again changes nothing."""
        if isinstance(self.metric, list) or trial_id in self._completed_trials or trial_id not in self._ot_trials:
            return  # Optuna keeps no intermediate values of a multi-objective study
        if self.metric not in result or "epoch" not in result:
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "this step is already reported": the replay above
            try:
                self._ot_trials[trial_id].report(float(result[self.metric]), int(result["epoch"]))
            except optuna.exceptions.UpdateFinishedTrialError:
                pass  # told before the driver stopped, resumed by Tune from an older state

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False):
        """Before Optuna is told the end: the last report's metric as the intermediate value of its epoch, and its
        validation accuracies and epoch as user attributes (`val/clean`, `val/pgd10`, `epoch`), so a figure can set
        any of them against the objective."""
        if result and trial_id in self._ot_trials and trial_id not in self._completed_trials:
            # a result Tune's scheduler ended the trial with (ASHA at max_t) reaches only this hook, not on_trial_result
            self.on_trial_result(trial_id, result)
            for key in FINAL_ATTRS:
                if isinstance(result.get(key), (int, float)):
                    self._ot_trials[trial_id].set_user_attr(key, float(result[key]) if key != "epoch" else
                                                            int(result[key]))
            ended = None
            if "failed_reason" in result:  # diverged: its NaN metric would leave the trial RUNNING in Optuna
                self._ot_trials[trial_id].set_user_attr("failed_reason", str(result["failed_reason"])[:500])
                ended = optuna.trial.TrialState.FAIL
            elif stopped_early(result) and not error:
                ended = optuna.trial.TrialState.PRUNED  # its value: its last report's (Optuna's rule)
            if ended is not None:
                try:
                    self._ot_study.tell(self._ot_trials[trial_id], state=ended)
                except optuna.exceptions.UpdateFinishedTrialError:
                    pass  # told before the driver stopped, resumed by Tune from an older state
                self._completed_trials.add(trial_id)
                return
        super().on_trial_complete(trial_id, result, error)

    def restore(self, checkpoint_path: str):
        super().restore(checkpoint_path)
        ran = {t.number for t in self._ot_trials.values()}
        study_id = self._storage.get_study_id_from_name(self._study_name)
        for t in self._ot_study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if t.number not in ran:  # asked after the searcher's last save: Tune never ran it
                tid = self._storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
                self._storage.set_trial_user_attr(tid, "never_ran", "handed out just before the driver stopped")
                self._ot_study.tell(t.number, state=optuna.trial.TrialState.FAIL)


def link_mlflow_run(url: str, study: str, tune_trial_id: str, run_id: str) -> bool:
    """Set `mlflow_run_id` on the study's trial of Tune's `tune_trial_id` while it runs (Optuna keeps a finished
    trial as it is); False when the study has no such running trial."""
    storage = optuna.storages.get_storage(url)
    study_id = storage.get_study_id_from_name(study)
    for t in storage.get_all_trials(study_id, deepcopy=False):
        if t.user_attrs.get("tune_trial_id") == tune_trial_id:
            if t.user_attrs.get("mlflow_run_id") == run_id:
                return True
            if t.state != optuna.trial.TrialState.RUNNING:
                return False
            storage.set_trial_user_attr(storage.get_trial_id_from_study_id_trial_number(study_id, t.number),
                                        "mlflow_run_id", run_id)
            return True
    return False


def study_attrs(spec, tracking_uri: str) -> dict:
    """What the study records of its sweep (see the module's doc)."""
    return {"space": json.dumps(spec.search["space"]),
            "metric": spec.metric if spec.multi_objective else spec.metric[0],
            "mode": spec.mode if spec.multi_objective else spec.mode[0], "sweep": spec.name,
            "tracking_uri": tracking_uri}
