"""Ray Tune + Optuna sweeps of the `ssat` trainer, tracked in MLflow. CLI: python -m sweeps --help"""
from .legacy import find_moved_modules

find_moved_modules()  # module paths that saved sweeps and scripts name from before a move (sweeps/legacy.py)
