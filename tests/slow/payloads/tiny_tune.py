"""A tiny Ray Tune sweep for the cluster tests: 2 trials, 2 reports each, a checkpoint with every report.

    python tests/slow/payloads/tiny_tune.py --storage-path PATH_OR_URI --name NAME

No torch: it checks the cluster, not the method. When the node's environment has MLFLOW_TRACKING_URI (set
by clusters/setup_node.sh on every node), each trial also logs its per-report metric and its checkpoint
folder to that server as one run named after the trial. Prints one line `PAYLOAD_RESULT {json}` and exits 0
only if every trial finished with 2 reports (Tuner.fit returns normally even after an interrupt).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import tempfile

import ray
from ray import tune

REPORTS = 2


def trainable(config: dict) -> None:
    context = tune.get_context()
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow = None
    if uri and config["experiment"]:
        import mlflow

        mlflow.set_tracking_uri(uri)
        experiment = mlflow.get_experiment_by_name(config["experiment"])
        mlflow.start_run(experiment_id=experiment.experiment_id, run_name=context.get_trial_name(),
                         tags={"trial_id": context.get_trial_id(), "hostname": socket.gethostname()})
    for epoch in range(1, REPORTS + 1):
        score = float(config["x"] * epoch)
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.json"), "w") as handle:
                json.dump({"epoch": epoch, "score": score}, handle)
            if mlflow:
                mlflow.log_metric("score", score, step=epoch)
                mlflow.log_artifacts(folder, artifact_path=f"checkpoints/epoch_{epoch}")
            tune.report({"score": score, "epoch": epoch, "node_ip": ray.util.get_node_ip_address()},
                        checkpoint=tune.Checkpoint.from_directory(folder))
    if mlflow:
        mlflow.end_run()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--storage-path", required=True)
    parser.add_argument("--name", required=True)
    args = parser.parse_args()
    ray.init()  # inside `ray job submit`: the cluster the job was submitted to
    experiment = ""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        import mlflow

        # Created once here: trials creating it at the same time fail with RESOURCE_ALREADY_EXISTS.
        mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
        if mlflow.get_experiment_by_name(args.name) is None:
            mlflow.create_experiment(args.name)
        experiment = args.name
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space={"x": tune.grid_search([1, 2]), "experiment": experiment},
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=tune.RunConfig(name=args.name, storage_path=args.storage_path, verbose=0),
    )
    results = tuner.fit()
    trials = [{"x": r.config["x"], "epoch": r.metrics.get("epoch"), "error": str(r.error) if r.error else None,
               "path": r.path, "node_ip": r.metrics.get("node_ip")} for r in results]
    ok = len(trials) == 2 and all(t["error"] is None and t["epoch"] == REPORTS for t in trials)
    # What the job's driver inherited from the head's raylet (clusters/setup_node.sh's ~/.ssat/env.sh):
    # the documented `ray job submit -- bash -c 'python -m sweeps run ... "$SSAT_STORAGE_PATH"'` relies on it.
    driver_env = {key: os.environ.get(key) for key in
                  ("SSAT_STORAGE_PATH", "SSAT_DATA_ROOT", "MLFLOW_TRACKING_URI", "RAY_AUTH_MODE", "SSAT_VENV")}
    driver_env["python_on_path"] = shutil.which("python")
    print("PAYLOAD_RESULT " + json.dumps({"ok": ok, "trials": trials, "mlflow_experiment": experiment,
                                          "driver_env": driver_env}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
