"""The demo's table states its CPU-sized choices in the caption: read from the config the trials ran, so a
`--set` or `--epochs` shows up there (the caption itself: tests/unit/test_analysis_cells.py)."""
from sweeps.demo import SPEC, setup_text
from sweeps.spec import load_spec

SHIPPED = ("CPU-sized setup: model cnn-small; 15 epochs of SGD (lr 0.05, x0.1 from epoch 12; batch 32); "
           "training PGD-5 (step 0.25 eps_max); 100 labeled + 2,000 pseudo-labeled images; validation 500 images; "
           "test: all test images (best checkpoint); AutoAttack: the first 100 test images, seed 0's best checkpoint")


def test_the_shipped_demo_states_its_choices():
    assert setup_text(load_spec(SPEC).trials()[0].config) == SHIPPED


def test_the_caption_follows_the_config_that_ran():
    spec = load_spec(SPEC, epochs=30, sets={"data.n_unlabeled": 3000, "eval.test_n": 200, "attack.steps": 7,
                                            "eval.autoattack_seeds": None, "optim.lr_decay_after_milestone": True})
    text = setup_text(spec.trials()[0].config)
    assert "30 epochs of SGD (lr 0.05, x0.1 from epoch 25; batch 32)" in text
    assert "training PGD-7" in text and "100 labeled + 3,000 pseudo-labeled" in text
    assert "test: the first 200 test images" in text and "every seed's best checkpoint" in text
    off = setup_text(load_spec(SPEC, sets={"eval.autoattack": False, "data.n_unlabeled": None}).trials()[0].config)
    assert "AutoAttack" not in off and "100 labeled + all other pseudo-labeled images" in off
