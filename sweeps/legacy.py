"""What sweeps saved before, read by the code of today: the one module of sweeps that knows old shapes.

Each entry keeps a kind of sweep folder readable, and says since when; it describes folders that exist, so it is
frozen. Old module paths are found through `MovedModules`, installed on `import sweeps` (sweeps/__init__.py), and a
trial's old settings through `old_trial_settings` (sweeps.trials.trial_settings); nothing else reads an old shape.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys

# Module paths that saved state or scripts name, each the module that holds its code now. Tune pickles the stage's
# callbacks and searcher by module path into its tuner.pkl and searcher-state-*.pkl; SLURM jobs, cron lines and
# notes name `python -m` entry points.
MOVED_MODULES = {
    # issue 27 renamed the callbacks' modules
    "sweeps.callback": "sweeps.trials.mlflow_callback", "sweeps.progress": "sweeps.trials.progress_callback",
    # issue 45 moved sweeps/'s flat modules into wings; sweeps.driver, sweeps.tracking and sweeps.costs are the
    # wings' packages now (nothing saved names those three: tests/data/stage-before-issue45)
    "sweeps.interrupt": "sweeps.driver.interrupt", "sweeps.run_options": "sweeps.driver.run_options",
    "sweeps.commands": "sweeps.driver.commands", "sweeps.driver_lock": "sweeps.driver.lock",
    "sweeps.disk": "sweeps.driver.disk", "sweeps.teacher_stage": "sweeps.driver.teacher_stage",
    "sweeps.resources": "sweeps.driver.cluster", "sweeps.reuse": "sweeps.driver.reuse",
    "sweeps.tuners": "sweeps.trials.tuners", "sweeps.trainable": "sweeps.trials.trainable",
    "sweeps.trial_settings": "sweeps.trials.trial_settings",
    "sweeps.progress_callback": "sweeps.trials.progress_callback",
    "sweeps.mlflow_callback": "sweeps.trials.mlflow_callback", "sweeps.outcomes": "sweeps.trials.outcomes",
    "sweeps.study": "sweeps.trials.study", "sweeps.ranking": "sweeps.trials.ranking",
    "sweeps.ui_link": "sweeps.tracking.ui_link", "sweeps.run_records": "sweeps.tracking.run_records",
    "sweeps.provenance": "sweeps.tracking.provenance",
    "sweeps.dryrun": "sweeps.costs.dryrun", "sweeps.calibrate": "sweeps.costs.calibrate",
    "sweeps.measure": "sweeps.costs.measure", "sweeps.measurements": "sweeps.costs.measurements",
    "sweeps.wall_time": "sweeps.costs.wall_time",
}


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path of MOVED_MODULES as its new module, the same object (a class unpickled by its old path is
    the class of today), and runs `python -m OLD` as `python -m NEW`. Asked only for names no file answers."""

    def find_spec(self, name, path=None, target=None):
        return importlib.machinery.ModuleSpec(name, self) if name in MOVED_MODULES else None

    def create_module(self, spec):
        module = importlib.import_module(MOVED_MODULES[spec.name])
        spec.loader_state = module.__spec__  # the import system sets the old path's spec on it next
        return module

    def exec_module(self, module):
        """Nothing to run (create_module imported the new module): its own spec back, or runpy, reload and relative
        imports would take it for the old path."""
        module.__spec__ = module.__spec__.loader_state

    def get_code(self, name):
        """`python -m OLD ARGS`: run the new module as __main__ with the same arguments (runpy asks for this)."""
        return compile(f"import runpy\nrunpy.run_module({MOVED_MODULES[name]!r}, run_name='__main__', alter_sys=True)",
                       f"<{name}: moved to {MOVED_MODULES[name]}>", "exec")


def find_moved_modules() -> None:
    """Let the old paths of MOVED_MODULES be imported and unpickled (once per process)."""
    if not any(isinstance(f, MovedModules) for f in sys.meta_path):
        sys.meta_path.append(MovedModules())


def old_trial_settings(settings: dict) -> dict | None:
    """The whole config of a grid or confirm trial saved before issue 27 (its settings held it as "cfg", nothing
    sampled), else None: a trial of today keeps its base config and sampled values apart."""
    return settings.get("cfg")
