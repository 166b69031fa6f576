"""The slow tier's harness (tests/slow): prerequisites and namespaced cluster runs (cluster_harness), the scenarios
run inside the namespaces by file path (ns_cluster, ns_slurm) and their checks (checks), and real sweep drivers in
subprocesses (real_driver)."""
