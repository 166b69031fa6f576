"""Every experiment the project creates or reuses is marked as model development; the UI links name the view."""
from mlflow.tracking import MlflowClient

from sweeps.tracking import Tracker, ui_url

KIND = ("mlflow.experimentKind", "custom_model_development")


def test_created_and_reused_experiments_carry_the_kind(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    made = Tracker(uri, "made", log=lambda s: None).experiment_id
    assert client.get_experiment(made).tags[KIND[0]] == KIND[1]
    old = client.create_experiment("old", tags={KIND[0]: "genai_development"})  # e.g. a store written before
    assert Tracker(uri, "old", log=lambda s: None).experiment_id == old
    assert client.get_experiment(old).tags[KIND[0]] == KIND[1]


def test_the_ui_link_opens_the_runs_in_the_model_training_view():
    assert ui_url("7") == "http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning"
    assert ui_url("7", "http://127.0.0.1:5001").startswith("http://127.0.0.1:5001/#/experiments/7/runs?")
