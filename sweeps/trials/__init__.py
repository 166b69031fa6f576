"""Everything Ray Tune: the tuners, the trainable, a trial's settings, the callbacks, outcomes, the study and the
ranking."""
