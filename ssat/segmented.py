"""One train-mode forward for several image batches, with the BatchNorm statistics of each batch kept to itself.

The training step runs the student in train mode on several batches one after the other (x, x_adv, x_pgd; or
x_l, x_u, x_adv, x_pgd), each normalised in every BatchNorm layer by its own batch statistics and each updating
the running statistics once. `segmented_forward(model, xs)` concatenates the batches and runs ONE forward in
which every BatchNorm module splits its input back into the batches ("segments"), runs its own forward on each
segment in the given order and concatenates the outputs. Each segment therefore goes through exactly the
BatchNorm call a separate forward would make: the same kernel on the same values (its own mean and biased
variance for the normalisation, its own gradient path), and the running statistics get the same sequential
momentum updates (num_batches_tracked += 1 per segment, so momentum=None cumulative averaging is exact too).
Every other layer of the project's models is per-sample (convolutions, ReLU, pooling, linear), so the logits,
the gradients and the BatchNorm buffers equal those of the separate forwards (up to the rounding of convolutions
over a larger batch).

Refused: dropout active in train mode (an nn.Dropout* module with p > 0, or a module with a float attribute
`dropout` > 0 such as the WideResNet block): one draw over the concatenation is not the separate forwards'
draws. The context manager raises; `segmented_forward` falls back to the separate forwards (strict=True raises).
Batch-coupling that is not a BatchNorm module or a detectable dropout (a functional F.batch_norm or F.dropout
with no module attribute behind it) is not seen; the project's models have none.

BatchNorm modules whose forward does not use batch statistics (eval mode with running statistics) run once on
the whole input: that is per-sample, so eval mode is a plain forward. Forward hooks on a BatchNorm module fire
once, with the concatenated input and output.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import torch
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd

from .runtime import patched_forwards

_MARK = "_ssat_segments"  # attribute of a segmented forward: the segment sizes it splits into


def segmentation_refusal(model: nn.Module) -> str | None:
    """Why a segmented forward of `model` in its current mode would differ from separate forwards, or None.

    Only dropout active in train mode is a reason (its random draws over one concatenated batch are not those of
    separate forwards); dropout in eval mode, or with p = 0, is the identity and fine.
    """
    for name, m in model.named_modules():
        if not m.training:
            continue
        if isinstance(m, _DropoutNd) and m.p > 0:
            return f"{name or type(m).__name__}: dropout p={m.p} in train mode (its random draws would differ)"
        p = m.__dict__.get("dropout")
        if isinstance(p, (int, float)) and not isinstance(p, bool) and p > 0:
            return f"{name or type(m).__name__}: dropout={p} in train mode (its random draws would differ)"
    return None


def _segmented(forward, module: _BatchNorm, sizes: tuple[int, ...]):
    """A replacement for `module.forward` (the bound `forward`) that runs it on each segment of dim 0."""
    total = sum(sizes)

    def forward_segments(x: torch.Tensor) -> torch.Tensor:
        # The same test as _BatchNorm.forward: batch statistics in train mode, or with no running statistics.
        if not (module.training or (module.running_mean is None and module.running_var is None)):
            return forward(x)  # running statistics: per-sample, one call over all segments is identical
        if x.shape[0] != total:
            raise ValueError(f"segmented BatchNorm: input has {x.shape[0]} samples, the segments {list(sizes)} "
                             f"sum to {total} (does the model change the batch dimension before a BatchNorm?)")
        # Python-int sizes: torch.compile traces one unrolled split/forward/cat, no graph break.
        return torch.cat([forward(part) for part in x.split(sizes)])

    setattr(forward_segments, _MARK, sizes)
    return forward_segments


@contextmanager
def segmented_batchnorm(model: nn.Module, sizes: Sequence[int]) -> Iterator[nn.Module]:
    """Within the block, each BatchNorm module of `model` (BatchNorm1d/2d/3d and subclasses) treats its input's
    dim 0 as len(sizes) segments of sizes[k] samples and runs its own forward on each, in order, as separate
    forwards would. The modules are restored on exit, also when the block raises.

    Raises ValueError for an empty or non-positive `sizes`, or when dropout is active (segmentation_refusal),
    RuntimeError when the model's BatchNorm modules are already segmented (nested use).
    """
    sizes = tuple(int(s) for s in sizes)
    if not sizes or min(sizes) <= 0:
        raise ValueError(f"segment sizes must be positive, got {list(sizes)}")
    reason = segmentation_refusal(model)
    if reason is not None:
        raise ValueError(f"segmented forward refused: {reason}")
    bns = [m for m in model.modules() if isinstance(m, _BatchNorm)]
    if any(hasattr(m.__dict__.get("forward"), _MARK) for m in bns):
        raise RuntimeError("the model's BatchNorm modules are already segmented (nested segmented_batchnorm)")
    with patched_forwards([(m, _segmented(m.forward, m, sizes)) for m in bns]):
        yield model


def segmented_forward(model: nn.Module, xs: Sequence[torch.Tensor], *, strict: bool = False) -> list[torch.Tensor]:
    """The logits of `model` on each batch of `xs`, as len(xs) separate forwards in that order would give them,
    from one forward over their concatenation.

    xs: S tensors (n_k, C, H, W) (or any (n_k, ...) the model takes), same trailing shape, dtype and device;
    n_k may differ. Returns S tensors (n_k, classes), views of one output. In train mode the BatchNorm running
    statistics end as after the S separate forwards (S sequential momentum updates, num_batches_tracked += S).
    A channels_last first batch gives a channels_last concatenation. When dropout is active in train mode
    (segmentation_refusal), it runs the separate forwards instead, or raises ValueError with strict=True.
    `model` may be a torch.compile'd module (its BatchNorm modules are those of the original one).
    """
    xs = list(xs)
    if len(xs) <= 1:
        return [model(x) for x in xs]
    reason = segmentation_refusal(model)
    if reason is not None:
        if strict:
            raise ValueError(f"segmented forward refused: {reason}")
        return [model(x) for x in xs]
    sizes = [x.shape[0] for x in xs]
    x = torch.cat(xs)
    if x.dim() == 4 and xs[0].is_contiguous(memory_format=torch.channels_last) and not xs[0].is_contiguous():
        x = x.contiguous(memory_format=torch.channels_last)  # a no-op when all of xs are channels_last
    # One forward: one convolution launch per layer over all segments (cheaper on a GPU than S launches over
    # smaller batches), while the BatchNorm statistics stay per batch, as the method's separate forwards have them.
    with segmented_batchnorm(model, sizes):
        out = model(x)
    return list(out.split(sizes))
