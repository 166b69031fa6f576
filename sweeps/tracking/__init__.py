"""Everything MLflow and nothing of Ray: the tracker, run records, provenance and the UI link."""
