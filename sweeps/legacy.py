"""What sweeps saved before, read by the code of today: the one module of sweeps that knows old shapes.

Each entry keeps a kind of sweep folder readable, and says since when; it describes folders that exist, so it is
frozen. Resuming reaches it through `find_moved_modules` (sweeps.tuners.restore_tuner) and `old_trial_settings`
(sweeps.trial_settings); nothing else reads an old shape.
"""
from __future__ import annotations

import importlib
import sys

# Issue 27 renamed modules whose classes Tune pickled by module path into a stage's tuner.pkl (the run config's
# callbacks): a sweep started before the rename resumes only if unpickling finds them under the old names.
MOVED_MODULES = {"sweeps.callback": "sweeps.mlflow_callback", "sweeps.progress": "sweeps.progress_callback"}


def find_moved_modules() -> None:
    """Make the old module paths of MOVED_MODULES name their new modules, for unpickling only (nothing imports
    them: the aliases live in sys.modules, not as files)."""
    for old, new in MOVED_MODULES.items():
        sys.modules.setdefault(old, importlib.import_module(new))


def old_trial_settings(settings: dict) -> dict | None:
    """The whole config of a grid or confirm trial saved before issue 27 (its settings held it as "cfg", nothing
    sampled), else None: a trial of today keeps its base config and sampled values apart."""
    return settings.get("cfg")
