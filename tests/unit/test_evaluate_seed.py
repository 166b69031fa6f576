"""PGD evaluation draws its random starts from a generator of its own: the same model gets the same number
every time (validation compares epochs on the same attack), and evaluating leaves the training's random
stream where it was (how often one validates cannot change the training)."""
import torch
import torch.nn as nn

from ssat.evaluate import evaluate_model, pgd_accuracy


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
