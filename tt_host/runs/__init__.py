"""Runs: the run directory store, per-stage fingerprints and the pipeline that drives stages."""
