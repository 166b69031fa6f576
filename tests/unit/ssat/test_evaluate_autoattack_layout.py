"""AutoAttack on a channels_last model and images of 3 channels (the trainer's layout for CIFAR and SVHN): on an
H200 every such evaluation with an image still robust after APGD-CE crashed in APGD-T, whose zero-gradient check
views a gradient buffer made like the images as (B, -1). The same happens on a CPU; a 1-channel image (MNIST) hides
it, since its two layouts coincide."""
import torch
import torch.nn as nn

from ssat.evaluate import autoattack_accuracy


def test_autoattack_runs_every_attack_on_channels_last_colour_images():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Flatten(), nn.Linear(4 * 8 * 8, 10))
    with torch.no_grad():
        model[2].bias.zero_()
        model[2].bias[0] = 20.0  # class 0 by a wide margin: every image stays robust, so every attack runs
    model = model.to(memory_format=torch.channels_last).eval()
    x = torch.rand(6, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    acc, after, seconds = autoattack_accuracy(model, x, torch.zeros(6, dtype=torch.long), eps=1e-3, batch_size=6,
                                              log=lambda s: None)
    assert acc == 100.0 and after == {"apgd-ce": 100.0, "apgd-t": 100.0, "fab-t": 100.0, "square": 100.0}
    assert list(seconds) == ["apgd-ce", "apgd-t", "fab-t", "square"] and all(s >= 0 for s in seconds.values())
