"""What a sweep costs: the cost model, the dry run, calibrate and its measurements."""
