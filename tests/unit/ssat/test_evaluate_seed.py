"""PGD evaluation draws its random starts from a generator of its own: the same model gets the same number
every time (validation compares epochs on the same attack), and evaluating leaves the training's random
stream where it was (how often one validates cannot change the training)."""
import torch
import torch.nn as nn

from ssat.config import from_dict
from ssat.datasets import load_arrays
from ssat.evaluate import evaluate_model, pgd_accuracy
from ssat.evaluate import first_test_images
from ssat.presets import preset


def _setup():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    x = torch.rand(300, 1, 4, 4)
    with torch.no_grad():
        y = model(x).argmax(1)
    return model, x, y


def test_the_same_model_gets_the_same_pgd_number_and_the_seed_is_what_decides_it():
    model, x, y = _setup()
    # one step of eps/10 from a random start: where the start lands decides many images at this eps
    runs = {seed: [pgd_accuracy(model, x, y, eps=0.3, steps=1, batch_size=64, seed=seed)[0] for _ in range(2)]
            for seed in (0, 1)}
    assert runs[0][0] == runs[0][1] and runs[1][0] == runs[1][1]
    assert runs[0][0] != runs[1][0]  # so the start is drawn (from the seeded generator), not fixed
    assert 0.0 < runs[0][0] < 100.0


def test_evaluating_draws_nothing_from_the_default_generator():
    model, x, y = _setup()
    torch.manual_seed(5)
    before = torch.get_rng_state()
    res = evaluate_model(model, x, y, eps=0.3, checkpoint="val", pgd_steps=(10, 20), autoattack=False,
                         batch_size=100, log=lambda s: None)
    assert torch.equal(torch.get_rng_state(), before)
    again = evaluate_model(model, x, y, eps=0.3, checkpoint="val", pgd_steps=(10, 20), autoattack=False,
                           batch_size=100, log=lambda s: None)
    assert [res[k]["acc"] for k in ("pgd10", "pgd20")] == [again[k]["acc"] for k in ("pgd10", "pgd20")]


def test_the_default_seed_is_0():
    model, x, y = _setup()
    default = pgd_accuracy(model, x, y, eps=0.3, steps=1, batch_size=64)[0]
    assert default == pgd_accuracy(model, x, y, eps=0.3, steps=1, batch_size=64, seed=0)[0]
    assert default != pgd_accuracy(model, x, y, eps=0.3, steps=1, batch_size=64, seed=1)[0]


def test_test_images_are_the_first_n_test_images_as_floats_with_their_subset_name():
    cfg = from_dict(preset("mnist5k-ssat-mbi"))
    arrays = load_arrays("mnist5k")
    x, y, subset = first_test_images(cfg, 7, torch.device("cpu"))
    assert subset == "first7" and x.dtype == torch.float32 and x.shape == (7, 1, 28, 28)
    assert torch.equal(x, arrays.x_test[:7].float() / 255.0) and torch.equal(y, arrays.y_test[:7])
    n = len(arrays.x_test)
    for asked in (None, n, n + 5):  # all of them, by default or when asked for as many or more
        x, y, subset = first_test_images(cfg, asked, torch.device("cpu"))
        assert subset == "full" and len(x) == len(y) == n
