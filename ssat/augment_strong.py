"""FixMatch's two views of an image: weak (flip-and-crop) and strong (flip-and-crop, RandAugment, Cutout).

Both run on the images' device and take their randomness from a CPU `torch.Generator`, like
`ssat.datasets.augment`, so a run is reproducible and resumable. torchvision's RandAugment draws from the
*global* torch RNG; `strong_augment` therefore seeds that RNG from the generator inside
`torch.random.fork_rng`, so the global state seen by the rest of the program is left untouched.

RandAugment applies one draw of operations to a whole tensor, so it is called per image (or per chunk of
`chunk` images, which then share their operations): strong views differ across the images of a batch.
It works on uint8 images with 1 (MNIST) or 3 channels. Every view returned is float in [0, 1].
"""
from __future__ import annotations

import contextlib

import torch

from .datasets import augment, to_float


def weak_augment(x_uint8: torch.Tensor, gen: torch.Generator, *, flip: bool, pad: int = 4) -> torch.Tensor:
    """alpha(x): random crop with `pad` zero padding and, when `flip`, a horizontal flip. Float in [0, 1]."""
    return augment(to_float(x_uint8), gen, pad=pad, flip=flip)


def cutout(x: torch.Tensor, gen: torch.Generator, size: float, fill: float = 0.5) -> torch.Tensor:
    """Set one random square per image to `fill` (gray); side = round(size * image side).

    The square's centre is uniform over the image, so it may be clipped at the border (DeVries & Taylor's
    Cutout, as in FixMatch). x: (B, C, H, W) float; returns a new tensor.
    """
    b, _, h, w = x.shape
    side = int(round(size * min(h, w)))
    if side <= 0 or b == 0:
        return x.clone()
    cy = torch.randint(0, h, (b,), generator=gen).to(x.device)
    cx = torch.randint(0, w, (b,), generator=gen).to(x.device)
    y0, x0 = cy - side // 2, cx - side // 2
    rows = torch.arange(h, device=x.device)[None, :]
    cols = torch.arange(w, device=x.device)[None, :]
    in_r = (rows >= y0[:, None]) & (rows < (y0 + side)[:, None])            # (B, H)
    in_c = (cols >= x0[:, None]) & (cols < (x0 + side)[:, None])            # (B, W)
    mask = (in_r[:, :, None] & in_c[:, None, :])[:, None]                   # (B, 1, H, W)
    return torch.where(mask, torch.full_like(x, fill), x)


def _randaugment(num_ops: int, magnitude: int, channels: int):
    from torchvision.transforms import v2

    # Geometric ops fill with the background: black for MNIST, FixMatch's mid-gray (128) for colour images.
    return v2.RandAugment(num_ops=num_ops, magnitude=magnitude, fill=0 if channels == 1 else 128)


def randaugment(x_uint8: torch.Tensor, gen: torch.Generator, *, num_ops: int, magnitude: int,
                chunk: int = 1) -> torch.Tensor:
    """torchvision's RandAugment per image (or per `chunk` images), seeded from `gen`. uint8 in, uint8 out."""
    if x_uint8.dtype != torch.uint8:
        raise TypeError(f"randaugment: expected uint8 images, got {x_uint8.dtype}")
    if num_ops == 0 or len(x_uint8) == 0:
        return x_uint8.clone()
    ra = _randaugment(num_ops, magnitude, x_uint8.shape[1])
    seed = int(torch.randint(0, 2**62, (1,), generator=gen).item())
    with torch.random.fork_rng(devices=[]), _single_thread(x_uint8.device):
        torch.manual_seed(seed)
        parts = [ra(x_uint8[i: i + chunk]) for i in range(0, len(x_uint8), chunk)]
    return torch.cat(parts)


@contextlib.contextmanager
def _single_thread(device: torch.device):
    """Per-image ops are tiny: on a CPU, handing them to a thread pool costs more than the work (20x on a busy
    2-core machine), so RandAugment runs on one intra-op thread; the setting is restored afterwards."""
    if device.type != "cpu":
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def strong_augment(x_uint8: torch.Tensor, gen: torch.Generator, *, flip: bool, num_ops: int = 2,
                   magnitude: int = 10, cutout_size: float = 0.5, pad: int = 4, chunk: int = 1) -> torch.Tensor:
    """A(x): flip-and-crop, then RandAugment(num_ops, magnitude), then Cutout (gray square). Float in [0, 1]."""
    x = augment(x_uint8, gen, pad=pad, flip=flip)  # on uint8: zero padding, exact pixel moves
    x = randaugment(x, gen, num_ops=num_ops, magnitude=magnitude, chunk=chunk)
    return cutout(to_float(x), gen, cutout_size).clamp_(0.0, 1.0)
