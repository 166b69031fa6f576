"""The training images' augmentation on their device, as airbench does: a random crop with zero padding and a
horizontal flip per image, its random numbers drawn first from the CPU generator whose state is checkpointed (exact
resume), then applied without any host synchronisation."""
from __future__ import annotations

import torch


def augment_draws(b: int, gen: torch.Generator, *, pad: int = 4, flip: bool = True):
    """The random numbers of `augment` for b images, from the CPU generator `gen` in this order: crop rows
    oy (b,), crop columns ox (b,) in [0, 2 pad], then (flip only) mirror (b,) bool, else None."""
    oy = torch.randint(0, 2 * pad + 1, (b,), generator=gen)
    ox = torch.randint(0, 2 * pad + 1, (b,), generator=gen)
    return oy, ox, (torch.rand(b, generator=gen) < 0.5) if flip else None


def crop_flip(x: torch.Tensor, oy: torch.Tensor, ox: torch.Tensor, mirror: torch.Tensor | None,
              pad: int = 4) -> torch.Tensor:
    """Crop with zero padding at offsets (oy, ox), mirrored horizontally where `mirror` (None: never).

    x: (B, C, H, W); oy, ox: (B,) ints in [0, 2 pad] and mirror: (B,) bool, on x's device -> (B, C, H, W).
    No random numbers and no host synchronisation: the draws are made before (augment_draws).
    """
    b, c, h, w = x.shape
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    rows = (oy[:, None] + torch.arange(h, device=x.device))[:, None, :, None]
    cols = (ox[:, None] + torch.arange(w, device=x.device))[:, None, None, :]
    out = padded[torch.arange(b, device=x.device)[:, None, None, None],
                 torch.arange(c, device=x.device)[None, :, None, None], rows, cols]
    if mirror is not None:
        out = torch.where(mirror[:, None, None, None], out.flip(3), out)
    return out


def augment(x: torch.Tensor, gen: torch.Generator, *, pad: int = 4, flip: bool = True) -> torch.Tensor:
    """Random crop with zero padding and (optionally) horizontal flip, per image, on x's device.

    x: (B, C, H, W) float in [0, 1]. Random numbers come from the CPU generator `gen` (checkpointable).
    """
    oy, ox, mirror = augment_draws(len(x), gen, pad=pad, flip=flip)
    return crop_flip(x, oy.to(x.device), ox.to(x.device), None if mirror is None else mirror.to(x.device), pad)
