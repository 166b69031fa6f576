"""The data of the GPU smoke sweeps (sweeps/specs/gpu-smoke*.yaml): synthetic CIFAR-10 files in torchvision's
layout (ssat/synthetic.py: class-dependent patterns a model learns) and a pseudo-label file for the specs' split, so
a sweep needs neither the real data set nor a teacher.

    python benchmarks/gpu_smoke_data.py DIR [--spec sweeps/specs/gpu-smoke.yaml] [--set KEY=VALUE ...]

writes DIR/cifar-10-batches-py/ and DIR/pseudo-labels.pt (with its .sha256 sidecar): the teacher's "logits" are the
true labels' one-hot times 5, so the pseudo-labels are right and confident. --set takes the same overrides the
sweep is run with (they may change the split). Prints the path of the pseudo-label file.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ssat.config import parse_overrides  # noqa: E402
from ssat.datasets import split_for  # noqa: E402
from ssat.pseudo_labels import TeacherOutputs  # noqa: E402
from sweeps.spec import load_spec  # noqa: E402
from ssat.synthetic import write_cifar10  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("--spec", default="sweeps/specs/gpu-smoke.yaml")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    root = Path(args.root).resolve()
    spec = load_spec(args.spec, sets=parse_overrides(args.set), data_root=str(root), cpu_only=True)
    cfg = spec.configs()[0]
    d = cfg.data
    write_cifar10(root, n_train=d.n_labeled + d.n_unlabeled + d.n_val + 10, n_test=cfg.eval.test_n or 300)
    arrays, split = split_for(cfg)
    labels = arrays.y_train[torch.from_numpy(split.unlabeled)]
    logits = 5.0 * torch.nn.functional.one_hot(labels, arrays.num_classes).float()
    path = root / "pseudo-labels.pt"
    TeacherOutputs(logits, split.hash, provenance={"made_by": "benchmarks/gpu_smoke_data.py (true labels)"}).save(path)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
