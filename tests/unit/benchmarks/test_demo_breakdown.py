"""benchmarks/demo_breakdown.py on a trial log written here: each stage's seconds from the stamps and the
epochs' own step timers, and the last checkpoint's log chosen per trial."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import demo_breakdown as db  # noqa: E402

LOG = """\
10:00:00 teacher: cached /x/teacher.pt
10:00:02 trial mnist5k-demo-abc-s0-demo on vm pid 1, threads 1
10:00:12 epoch 1/2 | loss 1.8 | eps_max 0.0300 | alpha 1.000 | val clean 52.00 | val pgd10 2.00 | 7.5s (261 img/s)
10:00:22 epoch 2/2 | loss 1.3 | eps_max 0.0600 | alpha 1.000 | val clean 80.20 | val pgd10 1.20 | 8.0s (289 img/s)
10:00:30   [best] pgd10: 70.00%
10:00:41   [best] pgd20: 68.00%
10:00:41     autoattack: apgd-ce (1/4) on 100 images, 0 s so far
10:01:40   [best] autoattack (100 images): 60.00% (after apgd-ce 62.00%, apgd-t 61.00%, fab-t 60.00%, square 60.00%)
"""


def test_a_trial_log_splits_into_its_stages():
    b = db.breakdown(LOG)
    assert b == {"epochs": 2, "training": 15.5, "epoch_overhead": 20 - 15.5, "final_pgd": 19, "autoattack": 59,
                 "total": 98}


def test_a_trial_without_autoattack_ends_at_its_last_pgd_line():
    b = db.breakdown("\n".join(LOG.splitlines()[:6]))
    assert b["autoattack"] == 0 and b["final_pgd"] == 19 and b["total"] == 39


def test_the_last_checkpoint_holds_the_log_that_is_read(tmp_path):
    trial = tmp_path / "runs" / "sweeps" / "d" / "tune" / "demo" / "train_trial_0"
    for i, text in ((9, "old"), (10, "new")):
        (trial / f"checkpoint_{i:06d}").mkdir(parents=True)
        (trial / f"checkpoint_{i:06d}" / "trial.log").write_text(text)
    logs = db.last_logs(tmp_path, "d")
    assert list(logs) == ["train_trial_0"] and logs["train_trial_0"].read_text() == "new"
    assert db.main(["--workdir", str(tmp_path), "--name", "missing"]) == 2
