"""One sweep's life on its driver: run and resume, its state, stops, the commands, the lock, the disk guard, the
teacher stage, the local Ray cluster, reuse."""
