"""The teacher stage: one FixMatch teacher per split, made (or found) on the driver before any trial starts,
and its MLflow run (the FixMatch row of the main table)."""
from __future__ import annotations

import json
import time
from pathlib import Path

from ssat.config import Config

from ..tracking.run_records import teacher_record


def teacher_stage(configs: list[Config], tracker, sweep: str, teacher_dir: Path, log=print) -> dict[str, str]:
    """Make (or find) one teacher per split on the driver before any trial starts; log its run."""
    from ssat.datasets import split_for
    from ssat.teacher import ensure_teacher, resolve_teacher
    from ssat.train import needs_teacher

    runs, done, seen = {}, set(), set()
    for cfg in configs:
        # configs that share data, teacher and architecture share a split and a teacher: load the data once
        same = json.dumps([cfg.to_dict()["data"], cfg.to_dict()["teacher"], cfg.model.name], sort_keys=True)
        if not needs_teacher(cfg) or same in seen:
            continue
        seen.add(same)
        if cfg.data.pseudo_labels:  # the user's file: checked here, before any trial starts; no teacher to make
            resolve_teacher(cfg, *split_for(cfg), log=log)
            continue
        cfg = cfg.replace(**{"data.teacher_dir": str(teacher_dir)})
        t0 = time.perf_counter()
        made = ensure_teacher(cfg, log=log)
        if made.key in done:
            continue
        done.add(made.key)
        log(f"[teacher] {cfg.data.dataset} split {made.split_hash}: {made.path} ({time.perf_counter() - t0:.1f} s)")
        runs[made.split_hash] = log_teacher_run(tracker, sweep, cfg, made)
    return runs


def log_teacher_run(tracker, sweep: str, cfg: Config, made) -> str:
    """The teacher's run from what `ensure_teacher` made or found (`ssat.teacher.TeacherFile`): its test
    metrics and protocol records, and its provenance as an artifact."""
    run = teacher_record(sweep, cfg, made.split_hash, made.key)
    tracker.ensure_run(run.key, run.tags, run.params, name=run.name)
    prov = made.provenance
    metrics = {k: v for k, v in prov.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    test = prov.get("test") or {}
    tm, tt = {}, {}
    if test:
        from ssat.evaluate import flatten_results

        tm, tt = flatten_results({"teacher": test})
    tracker.log_final(run.key, {**{f"teacher/{k}": v for k, v in metrics.items()}, **tm}, tt, 0)
    side = made.path.parent / "provenance.json"
    side.write_text(json.dumps(prov, indent=1, default=str))
    tracker.log_artifact(run.key, side, None)
    tracker.end(run.key)  # FINISHED
    tracker.drain()
    return tracker.find_run(run.key) or ""
