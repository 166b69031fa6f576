"""The teacher stage: one FixMatch teacher per split, made (or found) on the driver before any trial starts,
and its MLflow run (the FixMatch row of the main table)."""
from __future__ import annotations

import json
import time
from pathlib import Path

from ssat.config import Config

def teacher_stage(configs: list[Config], tracker, sweep: str, teacher_dir: Path, log=print) -> dict[str, str]:
    """Make (or find) one teacher per split on the driver before any trial starts; log its run."""
    from ssat.datasets import split_for
    from ssat.teacher import ensure_teacher, teacher_key
    from ssat.train import needs_teacher

    runs, done, seen = {}, set(), set()
    for cfg in configs:
        # configs that share data, teacher and architecture share a split and a teacher: load the data once
        same = json.dumps([cfg.to_dict()["data"], cfg.to_dict()["teacher"], cfg.model.name], sort_keys=True)
        if not needs_teacher(cfg) or same in seen:
            continue
        seen.add(same)
        cfg = cfg.replace(**{"data.teacher_dir": str(teacher_dir)})
        _, split = split_for(cfg)
        tkey = teacher_key(cfg, split)
        if tkey in done:
            continue
        done.add(tkey)
        t0 = time.perf_counter()
        path = ensure_teacher(cfg, log=log)
        log(f"[teacher] {cfg.data.dataset} split {split.hash}: {path} ({time.perf_counter() - t0:.1f} s)")
        runs[split.hash] = log_teacher_run(tracker, sweep, cfg, split, path, tkey)
    return runs


def log_teacher_run(tracker, sweep: str, cfg: Config, split, path: Path, tkey: str) -> str:
    from ssat.storage import load_verified

    prov = load_verified(path).get("provenance", {})
    key = f"{sweep}-teacher-{split.hash}-{tkey}"
    tracker.ensure_run(key, {"ssat.kind": "teacher", "ssat.sweep": sweep, "ssat.table": "main", "ssat.row": "FixMatch",
                             "ssat.dataset": cfg.data.dataset, "ssat.split_hash": split.hash,
                             "ssat.column_group": f"{cfg.data.dataset}/{cfg.teacher.model or cfg.model.name}",
                             "ssat.status": "FINISHED"},
                       {f"teacher.{k}": v for k, v in cfg.to_dict()["teacher"].items()} |
                       {"dataset": cfg.data.dataset, "split_seed": cfg.data.split_seed, "model": cfg.teacher.model or cfg.model.name},
                       name=f"teacher-{cfg.data.dataset}-{split.hash}")
    metrics = {k: v for k, v in prov.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    test = prov.get("test") or {}
    tm, tt = {}, {}
    if test:
        from ssat.evaluate import flatten_results

        tm, tt = flatten_results({"teacher": test})
    tracker.log_final(key, {**{f"teacher/{k}": v for k, v in metrics.items()}, **tm}, tt, 0)
    side = path.parent / "provenance.json"
    side.write_text(json.dumps(prov, indent=1, default=str))
    tracker.log_artifact(key, side, None)
    tracker.end(key, "FINISHED")
    tracker.drain()
    return tracker.find_run(key) or ""
