"""The trainer's files, written after every epoch and read on resume: best.pt and last.pt (weights, config and
metrics: what evaluation loads) and state.pt (everything to go on exactly: optimizer, RNGs, the data order, SWA, the
best so far). Functions of the Trainer `t` (ssat.train), kept apart from its epoch loop."""
from __future__ import annotations

import torch
import torch.nn as nn

from .storage import ForeignFileError, load_verified, save_verified


def weights(t, model: nn.Module, kind: str, epoch: int, metrics: dict) -> dict:
    return {"model": {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
            "config": t.cfg.to_dict(), "kind": kind, "epoch": epoch, "metrics": metrics,
            "split_hash": t.split.hash, "model_name": t.cfg.model.name}


def state_dict(t) -> dict:
    st = {"epoch": t.epoch, "model": t.model.state_dict(), "opt": t.opt.state_dict(),
          "gen": t.gen.get_state(), "torch_rng": torch.get_rng_state(), "best_score": t.best_score,
          "best_clean": t.best_clean, "best_epoch": t.best_epoch, "history": t.history,
          "train_seconds": t.train_seconds, "config_hash": t.cfg.config_hash(exclude_seed=False)}
    if t.device.type == "cuda":
        st["cuda_rng"] = torch.cuda.get_rng_state(t.device)
    if t.swa is not None:
        st["swa"] = t.swa.avg.state_dict()
    return st


def load_state(t) -> None:
    st = load_verified(t.out / "state.pt", map_location=t.device)
    if st.get("config_hash") != t.cfg.config_hash(exclude_seed=False):
        raise ForeignFileError(f"{t.out / 'state.pt'}: saved by another configuration; refusing to resume "
                               "into it (use a fresh output folder)")
    t.model.load_state_dict(st["model"])
    t.opt.load_state_dict(st["opt"])
    t.gen.set_state(st["gen"].cpu())  # the data-order generator lives on the CPU (state loaded to the device)
    torch.set_rng_state(st["torch_rng"].cpu())
    if "cuda_rng" in st and t.device.type == "cuda":
        torch.cuda.set_rng_state(st["cuda_rng"].cpu(), t.device)
    if t.swa is not None and "swa" in st:
        t.swa.avg.load_state_dict(st["swa"])
    t.epoch, t.best_score, t.best_epoch = st["epoch"], st["best_score"], st["best_epoch"]
    t.best_clean = st["best_clean"]
    t.history, t.train_seconds = st["history"], st["train_seconds"]
    t.log(f"resumed from {t.out / 'state.pt'} after epoch {t.epoch}")


def save(t, metrics: dict, selection: nn.Module, improved: bool) -> None:
    if improved:
        save_verified(weights(t, selection, "best", t.epoch, metrics), t.out / "best.pt")
    last = t.model if t.swa is None or not t.swa.active(t.epoch) else t.swa.avg.module
    save_verified(weights(t, last, "last", t.epoch, metrics), t.out / "last.pt")
    save_verified(state_dict(t), t.out / "state.pt")  # last: it marks the epoch as done
