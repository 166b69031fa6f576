"""FixMatch's two views of an image: weak (flip-and-crop) and strong (flip-and-crop, RandAugment, Cutout).

Both run on the images' device and take their randomness from a CPU `torch.Generator`, like
`ssat.augment.augment`, so a run is reproducible and resumable; the global torch RNG is never used.

RandAugment here is a batched re-implementation of torchvision's `transforms.v2.RandAugment` (num_magnitude_bins
31, nearest interpolation, fill 128 for 3-channel and 0 for 1-channel images) in which every image draws its own
`num_ops` operations and signs. torchvision applies one draw to a whole tensor, so the old per-image (or
per-chunk) calls launched hundreds of tiny kernels per batch from Python; here each operation slot is a fixed
set of batched tensor ops over the whole (B, C, H, W) uint8 batch, with per-image parameters broadcast:

    - the 5 geometric ops (ShearX/Y, TranslateX/Y, Rotate) as one batched affine grid + nearest `grid_sample`,
      the fill placed by a validity channel (torchvision's own trick);
    - Brightness, Color, Contrast and Sharpness as one blend `x * r + d * alpha` with a per-image degenerate
      image d (0, the grayscale, its mean, or the blur's difference);
    - Posterize, Solarize as per-image masks and thresholds that are the identity for other images;
    - AutoContrast and Equalize (batched histograms) computed for all images, selected by op id.

An op is the identity wherever it was not drawn, so one image changes in at most one stage of a slot. On a GPU
every stage runs on the whole batch (a fixed set of kernels, no host read); on a CPU, where a host read costs
nothing and arithmetic is the cost, each stage runs only on the images that drew it (`_only`). The
arithmetic follows torchvision's kernels (float32 products, the fused multiply-add of `add_(..., alpha=...)`,
truncation to uint8) so single images match `transforms.v2.functional` bit for bit on a CPU (see
tests/unit/ssat/test_views_randaugment.py for what is exact and what is not).

All draws of a call are made up front on the CPU (`*_draws`), turned into per-image parameters there, and sent to
the device in one copy (`upload`): no per-image or per-chunk Python loop, no `.item()`, no host synchronisation.
It works on uint8 images with 1 (MNIST) or 3 channels. Every view returned is float in [0, 1].
"""
from __future__ import annotations

import contextlib
import functools
from typing import NamedTuple, Sequence

import torch
import torch.nn.functional as F

from .augment import augment_draws, crop_flip
from .datasets import to_float

# torchvision's RandAugment._AUGMENTATION_SPACE, in its order; an op's id is its index here.
OPS = ("Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast",
       "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize")
SIGNED = frozenset(OPS[1:10])  # a random sign (negative with probability 1/2) for these magnitudes
_ID = {name: i for i, name in enumerate(OPS)}
GEOMETRIC = tuple(_ID[n] for n in ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"))
# Columns of the per-image parameters of one op slot (float32; integers and op ids are exact in float32).
P_OP, P_THETA, P_RATIO, P_ALPHA, P_MASK, P_THRESHOLD = 0, slice(1, 7), 7, 8, 9, 10
N_PARAMS = 11
NUM_BINS = 31


# ---- host side: draws and per-image parameters -------------------------------------------------
@functools.lru_cache(maxsize=64)
def magnitude_table(magnitude: int, num_bins: int, height: int, width: int) -> tuple[float, ...]:
    """Each op's magnitude at bin `magnitude` as torchvision computes it: a float32 linspace (Posterize: rounded
    bits) read back as a Python float; 0.0 for the ops without one. Indexed by op id."""
    mags = {
        "ShearX": torch.linspace(0.0, 0.3, num_bins), "ShearY": torch.linspace(0.0, 0.3, num_bins),
        "TranslateX": torch.linspace(0.0, 150.0 / 331.0 * width, num_bins),
        "TranslateY": torch.linspace(0.0, 150.0 / 331.0 * height, num_bins),
        "Rotate": torch.linspace(0.0, 30.0, num_bins),
        "Brightness": torch.linspace(0.0, 0.9, num_bins), "Color": torch.linspace(0.0, 0.9, num_bins),
        "Contrast": torch.linspace(0.0, 0.9, num_bins), "Sharpness": torch.linspace(0.0, 0.9, num_bins),
        "Posterize": (8 - (torch.arange(num_bins) / ((num_bins - 1) / 4))).round().int(),
        "Solarize": torch.linspace(1.0, 0.0, num_bins),
    }
    return tuple(float(mags[name][magnitude]) if name in mags else 0.0 for name in OPS)


def randaugment_draws(b: int, num_ops: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Every image's ops and signs, from `gen` in this order: op ids (b, num_ops) uniform over the 14 ops, then
    `negative` (b, num_ops) bool, True with probability 1/2 (torchvision: `torch.rand(()) <= 0.5`)."""
    ops = torch.randint(0, len(OPS), (b, num_ops), generator=gen)
    return ops, torch.rand(b, num_ops, generator=gen) <= 0.5


def signed_magnitudes(ops: torch.Tensor, negative: torch.Tensor, table: Sequence[float]) -> torch.Tensor:
    """(b, n) float64: the table's magnitude of each drawn op, negated where `negative` and the op is signed."""
    mag = torch.tensor(table, dtype=torch.float64)[ops]
    signed = torch.tensor([name in SIGNED for name in OPS])[ops]
    return torch.where(signed & negative, -mag, mag)


def _inverse_affine(ops: torch.Tensor, m: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """(..., 2, 3) float32: torchvision's `_get_inverse_affine_matrix` of each image's geometric op (identity for
    the others), computed in float64 in torchvision's order of operations, then rounded to float32 as it does.

    ShearX/Y: F.affine(shear=degrees(atan(m)), center=[0, 0], i.e. the top-left corner); TranslateX/Y:
    F.affine(translate=int(m)); Rotate: F.rotate(m), i.e. the inverse matrix of angle -(m % 360)."""
    zero = torch.zeros_like(m)

    def only(name, value):
        return torch.where(ops == _ID[name], value, zero)

    shear = torch.deg2rad(torch.rad2deg(torch.atan(m)))
    sx, sy = only("ShearX", shear), only("ShearY", shear)
    rot = only("Rotate", torch.deg2rad(-torch.remainder(m, 360.0)))
    tx, ty = only("TranslateX", torch.trunc(m)), only("TranslateY", torch.trunc(m))
    corner = (ops == _ID["ShearX"]) | (ops == _ID["ShearY"])  # center=[0, 0]: (-w/2, -h/2) from the middle
    cx, cy = torch.where(corner, -0.5 * width, zero), torch.where(corner, -0.5 * height, zero)
    cos_sy, tan_sx = torch.cos(sy), torch.tan(sx)
    a = torch.cos(rot - sy) / cos_sy
    b = -(a * tan_sx + torch.sin(rot))
    c = torch.sin(rot - sy) / cos_sy
    d = torch.cos(rot) - c * tan_sx
    m0, m1, m3, m4 = d, -b, -c, a
    m2 = cx - m0 * (cx + tx) - m1 * (cy + ty)
    m5 = cy - m3 * (cx + tx) - m4 * (cy + ty)
    return torch.stack([m0, m1, m2, m3, m4, m5], -1).float().unflatten(-1, (2, 3))


def randaugment_params(ops: torch.Tensor, negative: torch.Tensor, *, magnitude: int, height: int, width: int,
                       channels: int, num_bins: int = NUM_BINS) -> torch.Tensor:
    """(b, n, N_PARAMS) float32 on the CPU: what `randaugment_apply` needs of each image's op in each slot.

    Columns: P_OP op id; P_THETA the affine matrix already divided by (w/2, h/2) per output column (as
    torchvision's `_affine_grid` does; identity for non-geometric ops); P_RATIO r and P_ALPHA alpha of the blend
    `x * r + d * alpha` (r = 1, alpha = 0: the identity); P_MASK Posterize's bit mask (255: identity);
    P_THRESHOLD Solarize's threshold (256: identity). Every float is rounded to float32 from the float64 value
    torchvision's Python code holds, as its kernels round their scalar arguments.
    """
    m = signed_magnitudes(ops, negative, magnitude_table(magnitude, num_bins, height, width))
    one, zero = torch.ones_like(m), torch.zeros_like(m)
    factor = 1.0 + m  # Brightness, Color, Contrast, Sharpness: factor 1 + magnitude
    blend = (ops == _ID["Brightness"]) | (ops == _ID["Contrast"])
    mixes = ops == _ID["Contrast"]
    if channels == 3:  # Color on a 1-channel image is the identity (PIL's behaviour, which torchvision follows)
        blend |= ops == _ID["Color"]
        mixes |= ops == _ID["Color"]
    ratio = torch.where(blend, factor, one)
    alpha = torch.where(mixes | (ops == _ID["Sharpness"]), 1.0 - factor, zero)
    bits = m.long()  # Posterize: int(magnitude); mask = the top `bits` bits of a byte
    mask = torch.where(ops == _ID["Posterize"], (255 << (8 - bits).clamp(min=0)) & 255, 255)
    threshold = torch.where(ops == _ID["Solarize"], 255 * m, 256.0)
    theta = _inverse_affine(ops, m, height, width).transpose(-1, -2) / torch.tensor([0.5 * width, 0.5 * height])
    return torch.cat([ops[..., None].float(), theta.flatten(-2), ratio[..., None].float(), alpha[..., None].float(),
                      mask[..., None].float(), threshold[..., None].float()], -1)


def upload(parts: Sequence[torch.Tensor], device: torch.device | str) -> list[torch.Tensor]:
    """CPU tensors (values exact in float32) -> float32 tensors of the same shapes on `device`, in ONE copy.

    On CUDA the packed buffer is pinned and copied with non_blocking=True: a copy from pageable memory makes
    the host wait until the GPU has drained its queue, which would serialise every step with the GPU.
    """
    device = torch.device(device)
    if device.type == "cpu":
        return [p.float() for p in parts]
    flat = torch.cat([p.reshape(-1).float() for p in parts])
    if device.type == "cuda":
        flat = flat.pin_memory().to(device, non_blocking=True)
    else:
        flat = flat.to(device)
    return [f.view(p.shape) for f, p in zip(flat.split([p.numel() for p in parts]), parts)]


# ---- device side: the operations, batched ------------------------------------------------------
def _col(v: torch.Tensor) -> torch.Tensor:
    """(B,) per-image values -> (B, 1, 1, 1), to broadcast over (B, C, H, W)."""
    return v.view(-1, 1, 1, 1)


def affine_nearest(x: torch.Tensor, theta: torch.Tensor, fill: float) -> torch.Tensor:
    """Each image warped by its own inverse affine map, nearest neighbour, `fill` outside: torchvision's
    `_affine_grid` + `_apply_grid_transform` for a batch of matrices.

    x: (B, C, H, W) uint8; theta: (B, 3, 2) float32, the transposed inverse matrix divided by (w/2, h/2).
    A channel of ones is sampled with the image: where it comes back 0 the source pixel was outside.
    """
    b, c, h, w = x.shape
    base = torch.empty(1, h, w, 3, device=x.device)
    base[..., 0].copy_(torch.linspace((1.0 - w) * 0.5, (w - 1.0) * 0.5, steps=w, device=x.device))
    base[..., 1].copy_(torch.linspace((1.0 - h) * 0.5, (h - 1.0) * 0.5, steps=h, device=x.device).unsqueeze_(-1))
    base[..., 2].fill_(1)
    grid = base.view(1, h * w, 3).expand(b, h * w, 3).bmm(theta).view(b, h, w, 2)
    img = torch.cat([x.float(), torch.ones(b, 1, h, w, device=x.device)], 1)
    img = F.grid_sample(img, grid, mode="nearest", padding_mode="zeros", align_corners=False)
    img, valid = img[:, :c], img[:, c:]
    return torch.where(valid < 0.5, fill, img).round_().to(torch.uint8)


def grayscale(x: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) uint8 -> (B, 1, H, W) float32 luma, floored as torchvision's uint8 Color and Contrast use
    it (its exact sequence of float32 ops); a 1-channel image is itself."""
    if x.shape[1] == 1:
        return x.float()
    r, g, b = x.unbind(1)
    return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).floor_().unsqueeze(1)


def sharpness_difference(x: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) float32 of integers -> blur(x) - x inside a 1-pixel border, 0 on it (torchvision leaves the
    border as it is). blur: the kernel [[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13, rounded. The convolution here has
    the integer weights, so its sums are exact integers (also in TF32: 8-bit inputs, weights 1 and 5), divided
    once; a sum / 13 is never within 1/26 of a rounding tie, so torchvision's float weights round the same."""
    c = x.shape[1]
    kernel = torch.ones(c, 1, 3, 3, device=x.device)
    kernel[:, :, 1, 1] = 5.0
    blur = F.conv2d(x, kernel, groups=c).div_(13).round_()
    return F.pad(blur - x[:, :, 1:-1, 1:-1], (1, 1, 1, 1))


def blend(x: torch.Tensor, ops: torch.Tensor, ratio: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Brightness, Color, Contrast, Sharpness in one: clamp(x * r + d * alpha) truncated to uint8, with the
    degenerate image d of each image's op: Color the grayscale, Contrast its mean, Sharpness blur - x (r = 1),
    Brightness 0 (alpha = 0). x: (B, C, H, W) uint8; ops, ratio, alpha: (B,).

    torchvision computes fl32(x * r) then `add_(d, alpha=alpha)`, a fused multiply-add on CPU (vectorised) and
    CUDA: one rounding of the exact sum. In float64 the product d * alpha and the sum are exact (they need at
    most ~40 bits), so rounding that sum to float32 reproduces the fused result on any device.
    """
    xf = x.float()
    c = xf * _col(ratio)
    gray = grayscale(x)
    d = torch.where(_col(ops == _ID["Color"]), gray,
                    torch.where(_col(ops == _ID["Contrast"]), gray.mean(dim=(1, 2, 3), keepdim=True),
                                torch.where(_col(ops == _ID["Sharpness"]), sharpness_difference(xf), 0.0)))
    out = torch.addcmul(c.double(), d.double(), _col(alpha).double()).float()
    return out.clamp_(0, 255).to(torch.uint8)


def autocontrast(x: torch.Tensor) -> torch.Tensor:
    """Per image and channel, stretch [min, max] to [0, 255] (unchanged where min == max). uint8 (B, C, H, W)."""
    xf = x.float()
    lo, hi = xf.amin(dim=(-2, -1), keepdim=True), xf.amax(dim=(-2, -1), keepdim=True)
    flat = hi == lo
    inv_scale = torch.where(flat, 1.0, (hi - lo).mul_(1.0 / 255))
    return (xf - torch.where(flat, 0.0, lo)).div_(inv_scale).clamp_(0, 255).to(torch.uint8)


def equalize(x: torch.Tensor) -> torch.Tensor:
    """Histogram equalisation per image and channel, PIL's LUT (as torchvision), all (B, C) histograms at once:
    scatter_add into (B, C, 256) counts, cumsum, LUT, gather. uint8 (B, C, H, W)."""
    flat = x.flatten(2).long()                                                  # (B, C, HW)
    hist = torch.zeros(*flat.shape[:2], 256, dtype=torch.int32, device=x.device)
    hist.scatter_add_(-1, flat, hist.new_ones(1).expand_as(flat))
    cum = hist.cumsum(-1)                                                       # int64
    # The image's largest value is the first bin where the cumulative count reaches its total.
    non_max = flat.shape[-1] - hist.gather(-1, cum.argmax(-1, keepdim=True))
    step = non_max.div(255, rounding_mode="floor")                              # (B, C, 1)
    lut = (cum[..., :-1] + step // 2).div(step.clamp(min=1), rounding_mode="floor").clamp_(0, 255)
    lut = torch.cat([torch.zeros_like(lut[..., :1]), lut], -1).to(torch.uint8)  # lut[0] = 0
    out = lut.gather(-1, flat).view_as(x)
    return torch.where((step != 0).unsqueeze(-1), out, x)                      # step 0: left as it is


def _only(x: torch.Tensor, p: torch.Tensor, chosen: torch.Tensor, op, subsets: bool) -> torch.Tensor:
    """x with op(x', p') in the images where `chosen` (B,) and unchanged elsewhere.

    subsets=False (the GPU way): op runs on the whole batch and torch.where keeps its result where chosen; no
    host read, a fixed set of kernels whatever was drawn. subsets=True (the CPU way): op runs only on the chosen
    images, found with a host read (free on a CPU), so the work is that of the ops actually drawn. Every op is
    per image, so both give the same bytes.
    """
    if not subsets:
        return torch.where(_col(chosen), op(x, p), x)
    idx = chosen.nonzero().squeeze(1)
    if len(idx) == 0:
        return x
    out = x.clone()
    out[idx] = op(x[idx], p[idx])
    return out


def _geometric(x: torch.Tensor, p: torch.Tensor, fill: float) -> torch.Tensor:
    return affine_nearest(x, p[:, P_THETA].reshape(-1, 3, 2), fill)


def _blend(x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    return blend(x, p[:, P_OP].long(), p[:, P_RATIO], p[:, P_ALPHA])


def apply_slot(x: torch.Tensor, p: torch.Tensor, fill: float, *, subsets: bool = False) -> torch.Tensor:
    """One op per image: x (B, C, H, W) uint8, p (B, N_PARAMS) float32 on x's device -> uint8.

    Each stage changes only the images whose op it is (`_only`, or parameters that are the identity for the
    others), so the result is every image's own op applied to it. `subsets`: see `_only`.
    """
    ops = p[:, P_OP].long()
    geometric = (ops >= min(GEOMETRIC)) & (ops <= max(GEOMETRIC))
    blended = (ops >= _ID["Brightness"]) & (ops <= _ID["Sharpness"])
    x = _only(x, p, geometric, lambda xs, ps: _geometric(xs, ps, fill), subsets)
    x = _only(x, p, blended, _blend, subsets)
    x = x & _col(p[:, P_MASK].to(torch.uint8))                                  # Posterize
    x = torch.where(x >= _col(p[:, P_THRESHOLD]), 255 - x, x)                   # Solarize (compared in float32)
    x = _only(x, p, ops == _ID["AutoContrast"], lambda xs, ps: autocontrast(xs), subsets)
    return _only(x, p, ops == _ID["Equalize"], lambda xs, ps: equalize(xs), subsets)


def randaugment_apply(x_uint8: torch.Tensor, params: torch.Tensor, *, fill: float,
                      subsets: bool | None = None) -> torch.Tensor:
    """RandAugment with pre-drawn parameters: x (B, C, H, W) uint8, params (B, num_ops, N_PARAMS) float32 on its
    device (`randaugment_params`, `upload`). The slots run in order; autocast is off (the grid must be float32).
    subsets (`_only`): None picks by device, True on a CPU, False elsewhere (no host synchronisation)."""
    if x_uint8.dtype != torch.uint8:
        raise TypeError(f"randaugment: expected uint8 images, got {x_uint8.dtype}")
    if len(x_uint8) == 0:
        return x_uint8.clone()
    if subsets is None:
        subsets = x_uint8.device.type == "cpu"
    with torch.autocast(x_uint8.device.type, enabled=False), _one_cpu_thread(x_uint8.device):
        for k in range(params.shape[1]):
            x_uint8 = apply_slot(x_uint8, params[:, k], fill, subsets=subsets)
    return x_uint8


@contextlib.contextmanager
def _one_cpu_thread(device: torch.device):
    """On a CPU the ops here are small (the subsets path works on a few images per op): handed to a thread pool
    on a busy 2-core machine they can cost several times the work (measured: a 128-image MNIST batch, 3 ops,
    median 0.8 s with 2 threads against 20 ms with one), so they run on one intra-op thread, as torchvision's
    per-chunk calls did before; the setting is restored afterwards. Other devices: nothing."""
    if device.type != "cpu":
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def fill_value(channels: int) -> float:
    """Geometric ops fill with the background: black for MNIST, FixMatch's mid-gray (128) for colour images."""
    return 0.0 if channels == 1 else 128.0


def randaugment(x_uint8: torch.Tensor, gen: torch.Generator, *, num_ops: int, magnitude: int,
                num_bins: int = NUM_BINS) -> torch.Tensor:
    """RandAugment(num_ops, magnitude) with ops and signs drawn per image from `gen`. uint8 in, uint8 out."""
    if x_uint8.dtype != torch.uint8:
        raise TypeError(f"randaugment: expected uint8 images, got {x_uint8.dtype}")
    b, c, h, w = x_uint8.shape
    params = randaugment_params(*randaugment_draws(b, num_ops, gen), magnitude=magnitude, height=h, width=w,
                                channels=c, num_bins=num_bins)
    (params,) = upload([params], x_uint8.device)
    return randaugment_apply(x_uint8, params, fill=fill_value(c))


# ---- Cutout ----------------------------------------------------------------------------------
def cutout_side(size: float, h: int, w: int) -> int:
    return int(round(size * min(h, w)))


def cutout_draws(b: int, h: int, w: int, gen: torch.Generator, size: float) -> torch.Tensor:
    """(b, 2) centres (row, column) uniform over the image, from `gen`; none drawn when the side is 0."""
    if cutout_side(size, h, w) <= 0 or b == 0:
        return torch.zeros(b, 2)
    cy = torch.randint(0, h, (b,), generator=gen)
    cx = torch.randint(0, w, (b,), generator=gen)
    return torch.stack([cy, cx], 1)


def cutout_apply(x: torch.Tensor, centres: torch.Tensor, size: float, fill: float = 0.5) -> torch.Tensor:
    """One square per image set to `fill` at the given centres ((B, 2) on x's device); x (B, C, H, W) float."""
    b, _, h, w = x.shape
    side = cutout_side(size, h, w)
    if side <= 0 or b == 0:
        return x.clone()
    centres = centres.long()
    y0, x0 = centres[:, 0] - side // 2, centres[:, 1] - side // 2
    rows = torch.arange(h, device=x.device)[None, :]
    cols = torch.arange(w, device=x.device)[None, :]
    in_r = (rows >= y0[:, None]) & (rows < (y0 + side)[:, None])            # (B, H)
    in_c = (cols >= x0[:, None]) & (cols < (x0 + side)[:, None])            # (B, W)
    mask = (in_r[:, :, None] & in_c[:, None, :])[:, None]                   # (B, 1, H, W)
    return torch.where(mask, fill, x)


def cutout(x: torch.Tensor, gen: torch.Generator, size: float, fill: float = 0.5) -> torch.Tensor:
    """Set one random square per image to `fill` (gray); side = round(size * image side).

    The square's centre is uniform over the image, so it may be clipped at the border (DeVries & Taylor's
    Cutout, as in FixMatch). x: (B, C, H, W) float; returns a new tensor.
    """
    b, _, h, w = x.shape
    (centres,) = upload([cutout_draws(b, h, w, gen, size)], x.device)
    return cutout_apply(x, centres, size, fill)


# ---- the two views ---------------------------------------------------------------------------
def weak_draws(b: int, gen: torch.Generator, *, flip: bool, pad: int = 4) -> torch.Tensor:
    """(b, 3): crop rows, crop columns, mirror (0/1; 0 without flip), drawn as `ssat.augment.augment` draws."""
    oy, ox, mirror = augment_draws(b, gen, pad=pad, flip=flip)
    return torch.stack([oy, ox, mirror.long() if mirror is not None else torch.zeros_like(oy)], 1)


def weak_apply(x_uint8: torch.Tensor, draws: torch.Tensor, *, flip: bool, pad: int = 4) -> torch.Tensor:
    """Crop (zero padding) and flip with pre-drawn `draws` ((B, 3) on x's device); uint8 in, uint8 out."""
    d = draws.long()
    return crop_flip(x_uint8, d[:, 0], d[:, 1], d[:, 2].bool() if flip else None, pad)


def weak_augment(x_uint8: torch.Tensor, gen: torch.Generator, *, flip: bool, pad: int = 4) -> torch.Tensor:
    """alpha(x): random crop with `pad` zero padding and, when `flip`, a horizontal flip. Float in [0, 1]."""
    (draws,) = upload([weak_draws(len(x_uint8), gen, flip=flip, pad=pad)], x_uint8.device)
    return to_float(weak_apply(x_uint8, draws, flip=flip, pad=pad))


class StrongDraws(NamedTuple):
    """Everything random in a strong view of B images: crop (B, 3) as `weak_draws`, RandAugment parameters
    (B, num_ops, N_PARAMS), Cutout centres (B, 2)."""
    crop: torch.Tensor
    randaugment: torch.Tensor
    cutout: torch.Tensor


def strong_draws(shape: torch.Size | Sequence[int], gen: torch.Generator, *, flip: bool, num_ops: int = 2,
                 magnitude: int = 10, cutout_size: float = 0.5, pad: int = 4) -> StrongDraws:
    """The draws of `strong_augment` for images of `shape` (B, C, H, W), from `gen` in this order: crop, RandAugment
    (ops, signs), Cutout. On the CPU; `upload` them with the step's other draws."""
    b, c, h, w = shape
    crop = weak_draws(b, gen, flip=flip, pad=pad)
    params = randaugment_params(*randaugment_draws(b, num_ops, gen), magnitude=magnitude, height=h, width=w,
                                channels=c)
    return StrongDraws(crop, params, cutout_draws(b, h, w, gen, cutout_size))


def strong_apply(x_uint8: torch.Tensor, draws: StrongDraws, *, flip: bool, cutout_size: float = 0.5,
                 pad: int = 4) -> torch.Tensor:
    """A(x) from draws already on x's device. Float in [0, 1]."""
    x = weak_apply(x_uint8, draws.crop, flip=flip, pad=pad)  # on uint8: zero padding, exact pixel moves
    x = randaugment_apply(x, draws.randaugment, fill=fill_value(x.shape[1]))
    return cutout_apply(to_float(x), draws.cutout, cutout_size).clamp_(0.0, 1.0)


def strong_augment(x_uint8: torch.Tensor, gen: torch.Generator, *, flip: bool, num_ops: int = 2,
                   magnitude: int = 10, cutout_size: float = 0.5, pad: int = 4) -> torch.Tensor:
    """A(x): flip-and-crop, then RandAugment(num_ops, magnitude) per image, then Cutout (gray square).
    Float in [0, 1]."""
    draws = strong_draws(x_uint8.shape, gen, flip=flip, num_ops=num_ops, magnitude=magnitude,
                         cutout_size=cutout_size, pad=pad)
    draws = StrongDraws(*upload(list(draws), x_uint8.device))
    return strong_apply(x_uint8, draws, flip=flip, cutout_size=cutout_size, pad=pad)
