"""Two trials pinned to two Ray nodes by custom resources, for the two-node test.

    python tests/slow/payloads/pinned_trials.py --storage-path PATH --name NAME

Trial `pin=worker_node` needs the custom resource only the worker node offers, `pin=head_node` the one only
the head offers. Each trial reports twice with a checkpoint, logs its metric history and checkpoints to the
MLflow server named by MLFLOW_TRACKING_URI in its node's environment (it fails without one), and leaves
markers: STORAGE/NAME/markers/PIN.json (node id, address, host name, HOME, TMPDIR, working folder) on the
shared storage_path, and $HOME/ssat-marker-PIN in the HOME of the node it ran on. No torch.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile

import ray
from ray import tune

REPORTS = 2


def trainable(config: dict) -> None:
    import mlflow

    context = tune.get_context()
    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])  # the node's env, not the driver's
    experiment = mlflow.get_experiment_by_name(config["name"])
    marker = {
        "pin": config["pin"],
        "node_id": ray.get_runtime_context().get_node_id(),
        "node_ip": ray.util.get_node_ip_address(),
        "hostname": socket.gethostname(),
        "home": os.environ.get("HOME"),
        "tmpdir": os.environ.get("TMPDIR"),
        "cwd": os.getcwd(),
        "trial_id": context.get_trial_id(),
        "mlflow_tracking_uri": os.environ["MLFLOW_TRACKING_URI"],
    }
    markers = os.path.join(config["storage"], config["name"], "markers")
    os.makedirs(markers, exist_ok=True)
    with open(os.path.join(markers, f"{config['pin']}.json"), "w") as handle:
        json.dump(marker, handle)
    with open(os.path.join(os.environ["HOME"], f"ssat-marker-{config['pin']}"), "w") as handle:
        handle.write(marker["node_id"])
    with mlflow.start_run(experiment_id=experiment.experiment_id, run_name=f"pin={config['pin']}",
                          tags={"pin": config["pin"], "node_ip": marker["node_ip"], "hostname": marker["hostname"],
                                "trial_id": marker["trial_id"]}):
        for epoch in range(1, REPORTS + 1):
            score = float(epoch * (2 if config["pin"] == "worker_node" else 1))
            with tempfile.TemporaryDirectory() as folder:
                with open(os.path.join(folder, "state.json"), "w") as handle:
                    json.dump({"epoch": epoch, "score": score, "node_id": marker["node_id"]}, handle)
                mlflow.log_metric("score", score, step=epoch)
                mlflow.log_artifacts(folder, artifact_path=f"checkpoints/epoch_{epoch}")
                tune.report({"score": score, "epoch": epoch}, checkpoint=tune.Checkpoint.from_directory(folder))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--storage-path", required=True)
    parser.add_argument("--name", required=True)
    args = parser.parse_args()
    ray.init()
    import mlflow

    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    if mlflow.get_experiment_by_name(args.name) is None:
        mlflow.create_experiment(args.name)  # once, on the driver (concurrent creation races)
    pinned = tune.with_resources(trainable, lambda config: tune.PlacementGroupFactory([{"CPU": 1, config["pin"]: 1}]))
    tuner = tune.Tuner(
        pinned,
        param_space={"pin": tune.grid_search(["worker_node", "head_node"]), "name": args.name,
                     "storage": args.storage_path},
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=tune.RunConfig(name=args.name, storage_path=args.storage_path, verbose=0),
    )
    results = tuner.fit()
    trials = [{"pin": r.config["pin"], "epoch": r.metrics.get("epoch"), "path": r.path,
               "error": str(r.error) if r.error else None} for r in results]
    ok = len(trials) == 2 and all(t["error"] is None and t["epoch"] == REPORTS for t in trials)
    print("PAYLOAD_RESULT " + json.dumps({"ok": ok, "trials": trials, "mlflow_experiment": args.name}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
