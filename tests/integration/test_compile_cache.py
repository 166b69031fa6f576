"""Compile once per sweep: a trial process that compiles the step publishes its kernels to the sweep's shared
folder; a second process on another "node" (its own temporary folder) unpacks them and torch.compile finds every
graph in its cache instead of compiling it (inductor's FX-graph cache counters say so), on a real Trainer with
system.compile=default on the CPU."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

TRIAL = """
import json, sys, torch
from torch._dynamo.utils import counters
from ssat.config import from_dict
from ssat.presets import preset
from ssat.train import Trainer
cfg = from_dict(preset("mnist5k-ssat-mbi"), {"data.fully_labeled": True, "data.n_val": 20, "data.n_labeled": 200,
    "optim.epochs": 1, "attack.t": 1, "optim.lr_milestones": [1], "optim.lr_factors": [0.1], "attack.steps": 2,
    "optim.batch_size": 100, "system.compile": "default", "system.compile_cache": sys.argv[1], "system.threads": 1,
    "eval.val_every": 1})
tr = Trainer(cfg, sys.argv[2], log=lambda s: None)
tr.fit()
print(json.dumps({**tr.engine.status(), "hits": counters["inductor"]["fxgraph_cache_hit"],
                  "misses": counters["inductor"]["fxgraph_cache_miss"]}))
"""


def trial(shared: Path, node: Path, out: Path) -> dict:
    node.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TMPDIR": str(node), "PYTHONPATH": str(ROOT)}  # its own local folder: another node
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    proc = subprocess.run([sys.executable, "-c", TRIAL, str(shared), str(out)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_second_trial_on_another_node_compiles_nothing_the_first_published(tmp_path):
    shared = tmp_path / "shared"
    first = trial(shared, tmp_path / "node-a", tmp_path / "a")
    assert first["compile"] == "default" and first["compile_cache"].startswith("published:")
    assert first["misses"] > 0 and first["hits"] == 0
    second = trial(shared, tmp_path / "node-b", tmp_path / "b")
    assert second["compile_cache"].startswith("warm: unpacked")
    assert second["hits"] == first["misses"] and second["misses"] == 0  # every graph from the bundle
