"""The demo's table states its CPU-sized choices in the caption: read from the config the trials ran, so a
`--set` or `--epochs` shows up there (the caption itself: tests/unit/analysis/test_cells.py)."""
from types import SimpleNamespace

import pytest

from sweeps.demo import SPEC, best_row, setup_text
from sweeps.errors import SweepError
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


def _runs(cells: dict) -> list:
    """{(row, seed): pgd20 or None} -> the demo trials' runs as MLflow returns them (None: no result logged)."""
    return [SimpleNamespace(data=SimpleNamespace(tags={"ssat.row": row, "ssat.seed": str(seed)},
                                                 metrics={} if v is None else {"test/best/pgd20": v}))
            for (row, seed), v in cells.items()]


def test_the_best_row_is_the_best_mean_over_seeds_not_the_best_single_run():
    # b has the best single run (80) but a mean of 50; a's mean is 70; c has one seed missing its result
    runs = _runs({("b", 0): 80.0, ("a", 0): 70.0, ("a", 1): 70.0, ("b", 1): 20.0, ("c", 0): 65.0, ("c", 1): None})
    assert best_row(runs) == ("a", 70.0)
    # a missing result is left out of its row's mean, not read as 0: c's single 75 beats a's 70
    assert best_row(_runs({("a", 0): 70.0, ("c", 0): 75.0, ("c", 1): None})) == ("c", 75.0)
    # a tie goes to the first row by name, whatever order the store returns the runs in
    assert best_row(_runs({("z", 0): 60.0, ("m", 0): 60.0, ("a", 0): 50.0})) == ("m", 60.0)


def test_no_result_to_rank_by_is_an_error_naming_the_stage_and_metric():
    with pytest.raises(SweepError, match=r"^no trial of stage 'confirm' has test/best/pgd20: nothing to rank the rows "
                                         r"by$"):
        best_row(_runs({("a", 0): None, ("b", 0): None}), stage="confirm")


def test_the_demos_autoattack_reads_only_its_stages_trials(tmp_path):
    """The query autoattack_best reads the sweep's runs with: the demo stage's trials, not its teacher, its parent
    or another stage's trials."""
    from mlflow.tracking import MlflowClient

    from sweeps.demo import TRIALS

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("demo")
    for name, kind, stage in (("t", "trial", "demo"), ("teacher", "teacher", "demo"), ("parent", "sweep", ""),
                              ("s", "trial", "search")):
        client.create_run(exp, run_name=name, tags={"ssat.kind": kind, "ssat.stage": stage})
    assert [r.info.run_name for r in client.search_runs([exp], TRIALS.format(stage="demo"))] == ["t"]
    assert [r.info.run_name for r in client.search_runs([exp], TRIALS.format(stage="search"))] == ["s"]


def test_only_the_standard_row_selects_its_best_checkpoint_by_clean_accuracy():
    """Standard training's validation PGD-10 is a surviving image or two (noise): its best checkpoint is the one of
    highest validation clean accuracy; every adversarial row keeps the paper's (highest validation PGD-10)."""
    got = {}
    for t in load_spec(SPEC).trials():
        got.setdefault(t.config.method.lam == 0, set()).add(t.config.eval.select_by)
    assert got == {True: {"clean"}, False: {"pgd10"}}
