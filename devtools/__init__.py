"""What the tests and the benchmarks share: real servers (MLflow, PostgreSQL), socket and page helpers, the
sweep readers, the test tiers and the mutation runner. Not installed with the package."""
