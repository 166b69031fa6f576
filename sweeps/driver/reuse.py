"""A finished trial is never trained twice (`run --reuse`): a grid or confirm trial takes a FINISHED run of the same
tracking store with the same config hash and seed instead of training again.

Which run: a trial run (`ssat.kind=trial`) of any experiment but this sweep's own, that MLflow and its
`ssat.status` say FINISHED, holding every epoch of its config (`time/epochs`, and `train/loss` logged at each
epoch), test metrics each with its protocol record, and checkpoints whose SHA-256 matches their sidecar: a
damaged or partly recorded run is never reused. The config hash covers everything that is trained and evaluated
(ssat/config_hash.py), so a reused run is the trial's result; a run of another code version is still reused, and
the console and the reference say which of the git commit, its dirty flag or the lock file differ.

In the new sweep's experiment the trial becomes a *reference run*: its own key, name, row and table tags, the
original's metrics and protocol records (for MLflow's UI), and `ssat.reuses` (the original's run id) and
`ssat.reused_from` (its sweep). `analysis.collect` reads a reference as the run it names, so a table's cells,
provenance and curves point at the trained run (docs/tracking.md). Decided once per stage and kept in the
sweep's state, so a resumed stage trains exactly the trials it was going to.
"""
from __future__ import annotations

import hashlib
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from analysis.record import search_all

CODE_KEYS = (("git_commit", "the git commit"), ("git_dirty", "uncommitted changes"), ("lock_sha256", "the lock file"))


@dataclass
class Reuse:
    """A trial's finished run elsewhere in the store."""
    run_id: str
    sweep: str
    differs: list[str] = field(default_factory=list)  # which of CODE_KEYS differ from this sweep's code

    def as_dict(self) -> dict:
        return asdict(self)


def _trial_runs(client, exclude_experiment: str | None) -> dict[tuple[str, str], list]:
    """(config hash, seed) -> the FINISHED trial runs of the store's other experiments that trained (no reference)."""
    ids = [e.experiment_id for e in client.search_experiments() if e.experiment_id != exclude_experiment]
    out: dict[tuple[str, str], list] = {}
    if not ids:
        return out
    for r in search_all(client, ids, "tags.`ssat.kind` = 'trial' and attributes.status = 'FINISHED'"):
        tags = r.data.tags
        if "ssat.reuses" not in tags and tags.get("ssat.config_hash"):
            out.setdefault((tags["ssat.config_hash"], str(tags.get("ssat.seed"))), []).append(r)
    return out


def why_not(client, run) -> str | None:
    """None when `run` holds a whole trial; else what is missing or damaged."""
    data = run.data
    if data.tags.get("ssat.status") != "FINISHED":
        return f"its status is {data.tags.get('ssat.status', 'unknown')!r}"
    epochs = int(float(data.params.get("optim.epochs") or 0))
    if not epochs or data.metrics.get("time/epochs", 0) < epochs:
        return f"it recorded {data.metrics.get('time/epochs', 0):g} of {epochs} epochs"
    tests = [k for k in data.metrics if k.startswith("test/")]
    if not tests:
        return "it has no test metric"
    if any(f"protocol/{k[len('test/'):]}" not in data.tags for k in tests):
        return "a test metric lacks its protocol record"
    steps = {m.step for m in client.get_metric_history(run.info.run_id, "train/loss")}
    if not set(range(1, epochs + 1)) <= steps:
        return f"its training loss is logged at {len(steps)} of {epochs} epochs"
    return _checkpoint_damage(client, run.info.run_id)


def _checkpoint_damage(client, run_id: str) -> str | None:
    """None when checkpoints/best.pt is there and matches its .sha256 sidecar."""
    names = {Path(a.path).name for a in client.list_artifacts(run_id, "checkpoints")}
    if not {"best.pt", "best.pt.sha256"} <= names:
        return "its best checkpoint is not among its artifacts"
    import mlflow.artifacts

    with tempfile.TemporaryDirectory(prefix="ssat-reuse-") as tmp:
        ckpt, sidecar = (Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=f"checkpoints/{name}",
                                                                   dst_path=tmp, tracking_uri=client.tracking_uri))
                         for name in ("best.pt", "best.pt.sha256"))
        got = hashlib.sha256(ckpt.read_bytes()).hexdigest()
        want = (sidecar.read_text().split() or [""])[0]
    return None if got == want else "its best checkpoint fails its checksum"


def code_differs(run, code: dict) -> list[str]:
    """Which parts of the code version (CODE_KEYS) of `run` (its repro.* tags) differ from `code`."""
    tags = run.data.tags
    return [what for key, what in CODE_KEYS if str(tags.get(f"repro.{key}")) != str(code.get(key))]


def find(trials: list, client, experiment_id: str | None, code: dict, log=print) -> dict[str, Reuse]:
    """trial key -> the run it reuses, for those of `trials` (with their run records) a whole run exists for; a
    candidate that is damaged or partly recorded is said and passed over."""
    candidates = _trial_runs(client, experiment_id)
    out = {}
    for key, rec in trials:
        found = candidates.get((rec.tags["ssat.config_hash"], str(rec.tags["ssat.seed"])), [])
        for run in sorted(found, key=lambda r: r.info.end_time or 0, reverse=True):  # the newest whole one
            problem = why_not(client, run)
            sweep = run.data.tags.get("ssat.sweep", "?")
            if problem is None:
                out[key] = Reuse(run.info.run_id, sweep, code_differs(run, code))
                break
            log(f"[reuse] not reusing run {run.info.run_id} of {sweep} for {rec.name}: {problem}")
    return out


def summary(reused: dict[str, Reuse], total: int) -> str:
    """`[reuse] 6 of 14 trials reused: 4 from mnist5k-demo, 2 from mnist5k-paper-table1 (the git commit differs
    for 2)`."""
    by: dict[str, int] = {}
    for r in reused.values():
        by[r.sweep] = by.get(r.sweep, 0) + 1
    differ: dict[str, int] = {}
    for r in reused.values():
        for what in r.differs:
            differ[what] = differ.get(what, 0) + 1
    text = f"[reuse] {len(reused)} of {total} trials reused" + (
        ": " + ", ".join(f"{n} from {s}" for s, n in sorted(by.items())) if by else "")
    if differ:
        text += " (" + "; ".join(f"{what} differs for {n}" for what, n in differ.items()) + ")"
    return text


def reference(tracker, rec, reuse: Reuse, parent_run_id: str | None, client) -> None:
    """The trial's run in this sweep: a reference to the run it reuses, with that run's metrics and protocol
    records (module doc)."""
    original = client.get_run(reuse.run_id).data
    tags = {**rec.tags, "ssat.status": "FINISHED", "ssat.reuses": reuse.run_id, "ssat.reused_from": reuse.sweep}
    if reuse.differs:
        tags["ssat.reused_code_differs"] = ", ".join(reuse.differs)
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    tracker.ensure_run(rec.key, tags, rec.params, name=rec.name)
    protocols = {k: v for k, v in original.tags.items() if k.startswith("protocol/")}
    step = int(original.metrics.get("time/epochs", 0))
    tracker.log_final(rec.key, dict(original.metrics), protocols, step)
    tracker.end(rec.key, "FINISHED")


def records(spec, trials: list, extra: dict) -> list[tuple[str, object]]:
    """(key, run record) of each grid or confirm trial, as its trainable and callback will make them."""
    from ..trials.trial_settings import KEY, grid_space, resolve_trial

    settings = grid_space(spec, trials, extra)[KEY]["grid_search"]
    return [(m["trial_key"], m["record"]) for m in (resolve_trial({KEY: s})[1] for s in settings)]


def to_train(stage: str, spec, trials: list, state, tracker, extra: dict, parent_run_id: str | None,
             log=print) -> list:
    """The trials of a grid or confirm stage left to train once those a finished run exists for are referenced
    (decided once per stage: `state.reused[stage]`, trial key -> Reuse)."""
    recs = records(spec, trials, extra)
    if stage not in state.reused:
        found = find(recs, tracker.client, tracker.experiment_id, state.code, log)
        state.reused[stage] = {k: r.as_dict() for k, r in found.items()}
    chosen = {k: Reuse(**r) for k, r in state.reused[stage].items()}
    for key, rec in recs:
        if key in chosen:
            reference(tracker, rec, chosen[key], parent_run_id, tracker.client)
    if chosen:
        log(summary(chosen, len(trials)))
    return [t for t, (key, _) in zip(trials, recs) if key not in chosen]
