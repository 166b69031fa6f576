"""The demo's table states its CPU-sized choices in the caption: read from the config the trials ran, so a
`--set` or `--epochs` shows up there (the caption itself: tests/unit/test_analysis_cells.py)."""
import pandas as pd
import pytest

from analysis.collect import runs_frame
from sweeps.demo import SPEC, setup_text
from sweeps.errors import SweepError
from sweeps.evaluation import best_row
from sweeps.spec import load_spec

SHIPPED = ("CPU-sized setup: model cnn-small; 70 epochs of SGD (lr 0.05, x0.1 from epoch 49; batch 32), weights "
           "averaged (SWA) from epoch 61, batch-norm statistics averaged with them; "
           "training PGD-3 (step 0.5 eps_max); 100 labeled + 500 pseudo-labeled images; validation 500 images "
           "every 10 epochs and in the last two; test: all test images (best checkpoint); AutoAttack: the first 100 "
           "test images, seed 0's best checkpoint of the best row by PGD-20")


def test_the_shipped_demo_states_its_choices():
    assert setup_text(load_spec(SPEC).trials()[0].config) == SHIPPED


def test_the_caption_follows_the_config_that_ran():
    spec = load_spec(SPEC, epochs=30, sets={"data.n_unlabeled": 3000, "eval.test_n": 200, "attack.steps": 7,
                                            "eval.autoattack_seeds": None, "optim.lr_decay_after_milestone": True,
                                            "eval.val_every": 2})
    text = setup_text(spec.trials()[0].config)
    assert "30 epochs of SGD (lr 0.05, x0.1 from epoch 22; batch 32), weights averaged (SWA) from epoch 27, " \
           "batch-norm statistics averaged with them;" in text
    assert "training PGD-7" in text and "100 labeled + 3,000 pseudo-labeled" in text
    assert "validation 500 images every 2 epochs and in the last two;" in text
    assert "test: the first 200 test images" in text and "every seed's best checkpoint of the best row" in text
    # AutoAttack in every trial (eval.autoattack true): no best-row clause
    every = setup_text(load_spec(SPEC, sets={"eval.autoattack": True, "data.n_unlabeled": None,
                                             "eval.val_every": 1}).trials()[0].config)
    assert every.endswith("seed 0's best checkpoint") and "100 labeled + all other pseudo-labeled images" in every
    assert "validation 500 images; test" in every  # every epoch: nothing said
    recomputed = setup_text(load_spec(SPEC, sets={"optim.swa_bn": "recompute"}).trials()[0].config)
    assert "batch 32), weights averaged (SWA) from epoch 61, batch-norm statistics recomputed on clean images;" \
        in recomputed
    plain = setup_text(load_spec(SPEC, sets={"optim.swa_start": None, "optim.swa_bn": "recompute"}).trials()[0].config)
    assert "batch 32); training PGD-3" in plain  # no SWA: nothing said


def _runs(cells: dict) -> pd.DataFrame:
    """{(row, seed): pgd20 or None} -> a runs frame of demo trials, plus a teacher and a search trial that must
    not count."""
    recs = [{"run_id": f"{row}-{seed}", "experiment": "demo", "source": "mlflow", "meta.kind": "trial",
             "meta.stage": "demo", "meta.row": row, "meta.seed": seed, "metric.test/best/pgd20": v}
            for (row, seed), v in cells.items()]
    recs += [{"run_id": "t", "experiment": "demo", "source": "mlflow", "meta.kind": "teacher", "meta.stage": "demo",
              "meta.row": "FixMatch", "meta.seed": 0, "metric.test/best/pgd20": 99.0},
             {"run_id": "s", "experiment": "demo", "source": "mlflow", "meta.kind": "trial", "meta.stage": "search",
              "meta.row": "other", "meta.seed": 0, "metric.test/best/pgd20": 98.0}]
    return runs_frame(recs)


def test_the_best_row_is_the_best_mean_over_seeds_not_the_best_single_run():
    # b has the best single run (80) but a mean of 50; a's mean is 70; c has one seed missing its result
    runs = _runs({("a", 0): 70.0, ("a", 1): 70.0, ("b", 0): 80.0, ("b", 1): 20.0, ("c", 0): 65.0, ("c", 1): None})
    assert best_row(runs) == ("a", 70.0)
    assert best_row(runs, stage="search") == ("other", 98.0)  # the stage asked for, trials only (not the teacher)
    # a missing result is left out of its row's mean, not read as 0: c's single 75 beats a's 70
    assert best_row(_runs({("a", 0): 70.0, ("c", 0): 75.0, ("c", 1): None})) == ("c", 75.0)


def test_no_result_to_rank_by_is_an_error_naming_the_metric():
    with pytest.raises(SweepError, match="test/best/pgd20"):
        best_row(_runs({("a", 0): None, ("b", 0): None}))


def test_only_the_standard_row_selects_its_best_checkpoint_by_clean_accuracy():
    """Standard training's validation PGD-10 is a surviving image or two (noise): its best checkpoint is the one of
    highest validation clean accuracy; every adversarial row keeps the paper's (highest validation PGD-10)."""
    got = {}
    for t in load_spec(SPEC).trials():
        got.setdefault(t.config.method.lam == 0, set()).add(t.config.eval.select_by)
    assert got == {True: {"clean"}, False: {"pgd10"}}
