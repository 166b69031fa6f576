"""The batched RandAugment of ssat/views.py against torchvision's, op by op.

Every op is compared with torchvision.transforms.v2.functional on single uint8 images, 1 and 3 channels, at
several magnitude bins and both signs, with the magnitudes typed here from torchvision's RandAugment table (not
read from the module under test): a wrong table entry or a missing sign flip changes pixels and fails.

On a CPU all 14 ops match torchvision exactly, so every comparison here is exact (no tolerance):
    - geometric ops: the same float32 matrix and grid arithmetic, nearest sampling of integer pixels;
    - Brightness/Color/Contrast/Sharpness: torchvision rounds x * r to float32 and then adds d * alpha with one
      fused multiply-add; the module reproduces that single rounding in float64, which matters where the exact
      result is an integer (a gray pixel under Color) and truncation to uint8 would otherwise flip it by 1 (with
      a plain float32 x * r + d * alpha, 62 pixels of the 3-channel Color case below differ);
    - Sharpness's blur is rounded from exact integer sums (never within 1/26 of a tie);
    - Posterize, Solarize (compared in float32, as torchvision does), AutoContrast, Equalize: the same integer and
      float32 ops.
The GPU's way of running the ops (every op on the whole batch, selected with torch.where, no host read) is
checked here against the CPU's way (each op on the images that drew it). On a GPU itself, not testable here, the
batched affine grid (one bmm for the batch) and Contrast's batched mean may round differently from torchvision's
per-image ones in the last bit, which can move a nearest-neighbour sample at an exact half-pixel tie or a
truncation at an exact integer: rare differences of one pixel position or one grey level.
"""
import math

import pytest
import torch
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as TF

import ssat.views as A

NEAREST = InterpolationMode.NEAREST


def table(name: str, height: int, width: int) -> torch.Tensor | None:
    """torchvision's RandAugment magnitudes over 31 bins (torchvision/transforms/v2/_auto_augment.py)."""
    return {
        "ShearX": torch.linspace(0.0, 0.3, 31), "ShearY": torch.linspace(0.0, 0.3, 31),
        "TranslateX": torch.linspace(0.0, 150.0 / 331.0 * width, 31),
        "TranslateY": torch.linspace(0.0, 150.0 / 331.0 * height, 31),
        "Rotate": torch.linspace(0.0, 30.0, 31), "Brightness": torch.linspace(0.0, 0.9, 31),
        "Color": torch.linspace(0.0, 0.9, 31), "Contrast": torch.linspace(0.0, 0.9, 31),
        "Sharpness": torch.linspace(0.0, 0.9, 31),
        "Posterize": (8 - (torch.arange(31) / ((31 - 1) / 4))).round().int(),
        "Solarize": torch.linspace(1.0, 0.0, 31),
    }.get(name)


SIGNED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast", "Sharpness"}


def magnitude(name: str, bin_: int, negative: bool, height: int, width: int) -> float:
    t = table(name, height, width)
    m = float(t[bin_]) if t is not None else 0.0
    return -m if negative and name in SIGNED else m


def reference(img: torch.Tensor, name: str, m: float, fill: int) -> torch.Tensor:
    """One op of torchvision's RandAugment on one (C, H, W) uint8 image, through the public functional API."""
    if name == "Identity":
        return img
    if name in ("ShearX", "ShearY"):
        shear = [math.degrees(math.atan(m)), 0.0] if name == "ShearX" else [0.0, math.degrees(math.atan(m))]
        return TF.affine(img, angle=0.0, translate=[0, 0], scale=1.0, shear=shear, interpolation=NEAREST,
                         fill=fill, center=[0, 0])
    if name in ("TranslateX", "TranslateY"):
        move = [int(m), 0] if name == "TranslateX" else [0, int(m)]
        return TF.affine(img, angle=0.0, translate=move, scale=1.0, shear=[0.0, 0.0], interpolation=NEAREST,
                         fill=fill)
    if name == "Rotate":
        return TF.rotate(img, angle=m, interpolation=NEAREST, fill=fill)
    ops = {"Brightness": lambda: TF.adjust_brightness(img, 1.0 + m),
           "Color": lambda: TF.adjust_saturation(img, 1.0 + m),
           "Contrast": lambda: TF.adjust_contrast(img, 1.0 + m),
           "Sharpness": lambda: TF.adjust_sharpness(img, 1.0 + m),
           "Posterize": lambda: TF.posterize(img, int(m)),
           "Solarize": lambda: TF.solarize(img, 255 * m),
           "AutoContrast": lambda: TF.autocontrast(img),
           "Equalize": lambda: TF.equalize(img)}
    return ops[name]()


def images(channels: int) -> torch.Tensor:
    """Test images: noise, low-contrast noise, a constant, and (3 channels) a gray image, whose pixels equal their
    luma (where Color's and Contrast's rounding is most fragile); MNIST-sized with one channel."""
    side = 32 if channels == 3 else 28
    g = torch.Generator().manual_seed(channels)
    x = torch.randint(0, 256, (4, channels, side, side), generator=g, dtype=torch.uint8)
    x[1] = x[1] // 5 + 90
    x[2] = 77
    x[3] = x[3, :1].expand(channels, side, side)
    return x


def batched(x: torch.Tensor, name: str, bin_: int, negative: bool) -> torch.Tensor:
    """The module's RandAugment with every image's single op forced to `name`."""
    b, c, h, w = x.shape
    ops = torch.full((b, 1), A.OPS.index(name))
    params = A.randaugment_params(ops, torch.full((b, 1), negative), magnitude=bin_, height=h, width=w, channels=c)
    return A.randaugment_apply(x, params, fill=A.fill_value(c))


def mismatches(x: torch.Tensor, name: str, bin_: int, negative: bool) -> int:
    """Pixels where the module differs from torchvision (reference magnitudes from this file's table)."""
    _, c, h, w = x.shape
    m = magnitude(name, bin_, negative, h, w)
    expected = torch.stack([reference(img, name, m, 0 if c == 1 else 128) for img in x])
    return int((batched(x, name, bin_, negative) != expected).sum())


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("name", A.OPS)
def test_each_op_matches_torchvision_exactly(name, channels):
    """Bins 0 (magnitude 0), 10 (the recipes') and 30 (the largest), both signs where the op has one."""
    x = images(channels)
    cases = [(0, False)] if table(name, 32, 32) is not None else []
    cases += [(b, neg) for b in (10, 30) for neg in ((False, True) if name in SIGNED else (False,))]
    for bin_, negative in cases or [(10, False)]:
        assert mismatches(x, name, bin_, negative) == 0, (name, channels, bin_, negative)


def test_the_magnitude_table_is_torchvisions():
    from torchvision.transforms.v2 import RandAugment

    space = RandAugment._AUGMENTATION_SPACE
    assert tuple(space) == A.OPS
    for bin_ in (0, 7, 10, 30):
        got = A.magnitude_table(bin_, 31, 28, 32)
        for i, name in enumerate(A.OPS):
            mags, signed = space[name][0](31, 28, 32), space[name][1]
            assert got[i] == (float(mags[bin_]) if mags is not None else 0.0), name
            assert (name in A.SIGNED) == signed == (name in SIGNED), name
    # Values at the recipe's bin 10 (of 30), typed: shear 0.1, translate 14.5 / 3 -> int 4 px on 32, rotate 10
    # degrees, factors 1 +- 0.3, posterize 7 bits, solarize above 2/3 of 255.
    t = dict(zip(A.OPS, A.magnitude_table(10, 31, 32, 32)))
    assert t["ShearX"] == pytest.approx(0.1) and int(t["TranslateX"]) == 4 and t["Rotate"] == 10.0
    assert t["Brightness"] == pytest.approx(0.3) and t["Posterize"] == 7.0 and t["Solarize"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("name", [n for n in A.OPS if table(n, 32, 32) is not None])
def test_a_wrong_magnitude_table_is_caught(name, monkeypatch):
    """Serving this op the magnitude of bin 20 where bin 10 is asked for makes the op comparison fail."""
    real = A.magnitude_table

    def wrong(bin_, bins, h, w):
        out = list(real(bin_, bins, h, w))
        out[A.OPS.index(name)] = real(20, bins, h, w)[A.OPS.index(name)]
        return tuple(out)

    monkeypatch.setattr(A, "magnitude_table", wrong)
    assert mismatches(images(3), name, 10, False) > 0


@pytest.mark.parametrize("name", sorted(SIGNED))
def test_a_missing_sign_flip_is_caught(name, monkeypatch):
    monkeypatch.setattr(A, "SIGNED", A.SIGNED - {name})
    assert mismatches(images(3), name, 10, True) > 0


def test_two_ops_per_image_drawn_from_the_generator_match_torchvision():
    """The public randaugment: replaying the generator gives each image's two ops and signs; torchvision applied
    in that order, image by image, gives the same bytes. Covers the draws, the slot order and per-image params."""
    g = torch.Generator().manual_seed(11)
    x = torch.randint(0, 256, (24, 3, 32, 32), generator=g, dtype=torch.uint8)
    state = torch.Generator().manual_seed(3).get_state()
    out = A.randaugment(x, torch.Generator().manual_seed(3), num_ops=2, magnitude=10)
    replay = torch.Generator()
    replay.set_state(state)
    ops, negative = A.randaugment_draws(24, 2, replay)
    for img, o, n, got in zip(x, ops, negative, out):
        for k in range(2):
            name = A.OPS[o[k]]
            img = reference(img, name, magnitude(name, 10, bool(n[k]), 32, 32), 128)
        assert torch.equal(got, img), [A.OPS[i] for i in o]


def test_images_of_one_batch_get_their_own_ops():
    """Copies of one image with different draws come out as their own op made them, whatever the neighbours'."""
    x = images(3)[:1].expand(5, -1, -1, -1).contiguous()
    names = ["Rotate", "Solarize", "Equalize", "ShearY", "Identity"]
    ops = torch.tensor([[A.OPS.index(n)] for n in names])
    params = A.randaugment_params(ops, torch.zeros(5, 1, dtype=torch.bool), magnitude=10, height=32, width=32,
                                  channels=3)
    out = A.randaugment_apply(x, params, fill=128.0)
    assert len({tuple(v.flatten().tolist()) for v in out}) == 5
    for i, name in enumerate(names):
        assert torch.equal(out[i], reference(x[0], name, magnitude(name, 10, False, 32, 32), 128)), name
        assert torch.equal(out[i:i + 1], A.randaugment_apply(x[i:i + 1], params[i:i + 1], fill=128.0))
    # Drawn at random, 64 copies of one image get 64 independent draws, not one per chunk of images.
    drawn, _ = A.randaugment_draws(64, 2, torch.Generator().manual_seed(0))
    assert len({tuple(d.tolist()) for d in drawn}) > 40
    assert not all(torch.equal(drawn[i], drawn[i + 1]) for i in range(0, 64, 4))


@pytest.mark.parametrize("channels", [1, 3])
def test_the_gpu_way_and_the_cpu_way_give_the_same_bytes(channels):
    """subsets=False (every op on the whole batch, torch.where by op id: what a GPU runs, with no host read) and
    subsets=True (each op on the images that drew it: the CPU's way) agree on a batch of random draws."""
    g = torch.Generator().manual_seed(channels)
    side = 32 if channels == 3 else 28
    x = torch.randint(0, 256, (32, channels, side, side), generator=g, dtype=torch.uint8)
    params = A.randaugment_params(*A.randaugment_draws(32, 2, g), magnitude=10, height=side, width=side,
                                  channels=channels)
    fill = A.fill_value(channels)
    everywhere = A.randaugment_apply(x, params, fill=fill, subsets=False)
    assert torch.equal(everywhere, A.randaugment_apply(x, params, fill=fill, subsets=True))
    assert torch.equal(everywhere, A.randaugment_apply(x, params, fill=fill))  # a CPU picks subsets


def test_reproducible_from_the_generator_and_the_global_rng_untouched():
    x = torch.randint(0, 256, (8, 3, 32, 32), generator=torch.Generator().manual_seed(2), dtype=torch.uint8)
    before = torch.get_rng_state()
    a = A.strong_augment(x, torch.Generator().manual_seed(9), flip=True, num_ops=3)
    b = A.strong_augment(x, torch.Generator().manual_seed(9), flip=True, num_ops=3)
    assert torch.equal(a, b)
    assert not torch.equal(a, A.strong_augment(x, torch.Generator().manual_seed(10), flip=True, num_ops=3))
    r1 = A.randaugment(x, torch.Generator().manual_seed(4), num_ops=2, magnitude=10)
    assert torch.equal(r1, A.randaugment(x, torch.Generator().manual_seed(4), num_ops=2, magnitude=10))
    assert torch.equal(torch.get_rng_state(), before)
    g = torch.Generator().manual_seed(4)
    A.randaugment(x, g, num_ops=2, magnitude=10)
    assert not torch.equal(g.get_state(), torch.Generator().manual_seed(4).get_state())  # it drew from `gen`


def test_op_choice_is_uniform_and_signs_are_fair():
    """14,000 draws: each op's count within 20% of 1,000 (about 6.5 standard deviations), negatives near 1/2."""
    ops, negative = A.randaugment_draws(7000, 2, torch.Generator().manual_seed(0))
    counts = torch.bincount(ops.flatten(), minlength=14)
    assert len(counts) == 14 and counts.min() >= 800 and counts.max() <= 1200, counts.tolist()
    assert 0.47 < negative.float().mean().item() < 0.53
    params = A.randaugment_params(ops[:50], negative[:50], magnitude=10, height=32, width=32, channels=3)
    assert torch.equal(params[..., A.P_OP].long(), ops[:50])


def test_edges_empty_batch_no_ops_and_dtype():
    g = torch.Generator().manual_seed(0)
    x = images(3)
    assert torch.equal(A.randaugment(x, g, num_ops=0, magnitude=10), x)
    assert A.randaugment(x[:0], g, num_ops=2, magnitude=10).shape == (0, 3, 32, 32)
    assert A.strong_augment(x[:0], g, flip=True).shape == (0, 3, 32, 32)
    with pytest.raises(TypeError, match="uint8"):
        A.randaugment(x.float(), g, num_ops=2, magnitude=10)
    # upload: one copy of several parts, shapes kept, float32 (on a CPU, the parts themselves)
    parts = A.upload([torch.arange(6).view(2, 3), torch.tensor([True, False])], "cpu")
    assert [p.shape for p in parts] == [(2, 3), (2,)] and all(p.dtype == torch.float32 for p in parts)
