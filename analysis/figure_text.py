"""What every figure of `analysis.plots` and `analysis.curves` shares: its resolution, how many configurations it
draws at most, and the statement under it of which runs it draws and how they were scored."""
from __future__ import annotations

import textwrap

import pandas as pd
from matplotlib.figure import Figure

DPI = 100
MAX_CONFIGS = 8


# ---- what a figure shows, said on it ---------------------------------------------------------
def eps_text(eps: float) -> str:
    """8/255 as '8/255', anything else as '%g' (0.3)."""
    k = eps * 255
    return f"{round(k)}/255" if 0 < eps < 1 and abs(k - round(k)) < 1e-6 else f"{eps:g}"


def data_statement(experiments, seeds, counts, unit: str, protocol_text: str) -> str:
    """'experiment e; seeds 0, 1 (2 per bar); <protocol>': which runs a figure draws and how they were scored.
    `counts` are the numbers of seeds behind each drawn `unit` (bar, point, curve)."""
    exps = sorted({str(e) for e in experiments if e is not None and not pd.isna(e)})
    known = sorted({int(s) for s in seeds if s is not None and not pd.isna(s)})
    lo, hi = min(counts), max(counts)
    return (f"{'experiments' if len(exps) > 1 else 'experiment'} {', '.join(exps) or 'unknown'}; "
            f"seeds {', '.join(map(str, known)) or 'unknown'} ({lo if lo == hi else f'{lo}-{hi}'} per {unit}); "
            f"{protocol_text}")


def _state(fig: Figure, text: str) -> None:
    """The data statement under the figure (kept inside it by the constrained layout)."""
    fig.supxlabel(textwrap.fill(text, int(fig.get_figwidth() * 14)), fontsize="small")


def _run_seeds(runs: pd.DataFrame) -> list:
    seed = runs.get("meta.seed", pd.Series(None, index=runs.index, dtype=object))
    return list(seed.fillna(runs["param.seed"]) if "param.seed" in runs else seed)


def _val_protocol(runs: pd.DataFrame, keys) -> str:
    """Validation metrics of trial runs: the held-out split; val/pgd10 is PGD-10 at the run's eps."""
    eps = sorted(set(runs.get("param.attack.eps", pd.Series(dtype=float)).dropna().astype(float)))
    pgd = f" (PGD-10 at eps {', '.join(map(eps_text, eps)) or 'of the run'})" if "val/pgd10" in keys else ""
    return f"protocol: validation split, {', '.join(keys)}{pgd}, trial runs"
