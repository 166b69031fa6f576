"""The main job's path (`python -m sweeps demo`) at a smaller scale: teacher, ablation sweep on a local Ray,
tracked runs, the regenerated table (md + LaTeX + provenance), its plot, and the MLflow UI command."""
import pytest
from mlflow.tracking import MlflowClient

from analysis.collect import load_mlflow_runs
from sweeps.cli import main as sweeps_main

pytestmark = pytest.mark.integration
SMALL = ["data.n_unlabeled=100", "data.n_val=40", "eval.test_n=60", "eval.pgd_steps=[10,20]",
         "eval.autoattack_n=8", "eval.autoattack_seeds=[0,1]", "teacher.steps=20", "teacher.eval_every=10",
         "system.threads=1"]


def test_demo_small(ray_local, teacher_dir, tmp_path, capsys):
    rc = sweeps_main(["demo", "--workdir", str(tmp_path), "--epochs", "2", "--seeds", "0", "1", "--set", *SMALL])
    assert rc == 0
    out = capsys.readouterr().out
    table = (tmp_path / "outputs" / "mnist5k-demo" / "ablation.md").read_text()
    for row in ("Lin.", "Cur."):
        assert row in table
    assert "| standard training |  | " in table  # the baseline row (lambda 0), after the paper's six
    assert "(" in table  # mean (std) over the two seeds
    assert (tmp_path / "outputs" / "mnist5k-demo" / "ablation.tex").read_text().count("\\\\") >= 6
    png = tmp_path / "outputs" / "mnist5k-demo" / "ablation.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "ui --backend-store-uri sqlite:///" in out and "[stage] teacher" in out and "[stage] analysis" in out
    assert "/runs?workflowType=machine_learning" in out  # the runs, not MLflow 3's GenAI overview
    # the final evaluation shows in the driver's console, from the trial's log (sweeps.trials.progress_callback); the
    # trials
    # skip AutoAttack: it runs once, after them, on the best row's seeds in eval.autoattack_seeds
    assert " s0: final evaluation: best checkpoint on 60 test images, PGD-10, PGD-20\n" in out
    runs = load_mlflow_runs(["mnist5k-demo"], f"sqlite:///{tmp_path / 'mlflow.db'}")
    trials = runs[runs["meta.kind"] == "trial"]
    best = trials.groupby("meta.row")["metric.test/best/pgd20"].mean().idxmax()
    assert f"[stage] autoattack: the best row {best} (test PGD-20 " in out
    assert f"  {best} s0: autoattack: apgd-ce (1/4) on 8 images" in out
    with_aa = trials[trials["metric.test/best/autoattack"].notna()]
    assert sorted(with_aa["meta.row"]) == [best, best] and sorted(with_aa["meta.seed"]) == [0, 1]
    assert (with_aa["metric.test/best/autoattack/square"] == with_aa["metric.test/best/autoattack"]).all()
    assert all('"subset":"first8"' in p for p in with_aa["protocol.best/autoattack"])
    # every row has a convergence verdict, printed and written, and the caption states the setup
    conv = (tmp_path / "outputs" / "mnist5k-demo" / "convergence.md").read_text()
    for row in ("const|off", "linear|on", "curious|on", "standard"):
        assert f"[convergence] {row}: " in out and f"| {row.replace('|', chr(92) + '|')} | " in conv
    assert "CPU-sized setup: model cnn-small; 2 epochs of SGD" in table
    assert "first8" in table or "first8" in (tmp_path / "outputs" / "mnist5k-demo"
                                             / "ablation.provenance.json").read_text()
    # run again: the finished sweep is found, nothing is retrained
    assert sweeps_main(["demo", "--workdir", str(tmp_path), "--epochs", "2", "--seeds", "0", "1", "--set", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "found the finished sweep" in out and f"  {best} s0: best checkpoint has AutoAttack already" in out
    again = load_mlflow_runs(["mnist5k-demo"], f"sqlite:///{tmp_path / 'mlflow.db'}")
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    for rid in with_aa["run_id"]:  # the rerun added no second AutoAttack value
        assert len(client.get_metric_history(rid, "test/best/autoattack")) == 1
    assert len(again) == len(runs)
