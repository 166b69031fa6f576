"""Cluster files of ssat-sweeps (launcher YAMLs, node scripts, the Slurm template) and their offline linter.

    python -m clusters.cluster_check [FILE...]

Importable without torch or ray (the linter imports Ray's autoscaler only to validate a YAML).
"""
