"""Ray Tune + Optuna sweeps of the `ssat` trainer, tracked in MLflow. CLI: python -m sweeps --help"""
