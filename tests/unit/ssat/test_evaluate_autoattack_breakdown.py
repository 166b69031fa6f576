"""AutoAttack's robust accuracy after each of its attacks: recorded with the result, in the attack order."""
import torch
import torch.nn as nn

from ssat.evaluate import AA_ATTACKS, evaluate_model, flatten_results


def test_robust_accuracy_after_each_attack_is_recorded_in_order():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 10))
    x = torch.rand(6, 1, 2, 2)  # tiny: FAB-T and Square run on what APGD leaves robust
    with torch.no_grad():
        y = model(x).argmax(1)  # every image clean-correct, so each attack has something to break
    lines = []
    res = evaluate_model(model, x, y, eps=0.03, checkpoint="best", pgd_steps=(10,), autoattack=True,
                         batch_size=6, log=lines.append)
    aa = res["autoattack"]
    assert list(aa["after"]) == AA_ATTACKS
    after = list(aa["after"].values())
    # each attack only runs on the images still robust: the accuracy never rises along the chain,
    # and the last one is the final AutoAttack number
    assert all(a >= b for a, b in zip(after, after[1:])), after
    assert after[0] <= res["clean"]["acc"] == 100.0
    assert after[-1] == aa["acc"]
    assert 0 < after[-1] < after[0] < 100.0 or 0 < after[-1] <= after[0] < 100.0  # some broken, some robust
    assert [ln for ln in lines if "autoattack: apgd-ce (1/4)" in ln]  # progress while it runs
    metrics, _ = flatten_results({"best": res})
    assert metrics["test/best/autoattack/apgd-ce"] == after[0]
    assert metrics["test/best/autoattack/square"] == metrics["test/best/autoattack"]
