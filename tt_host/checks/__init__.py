"""Checks before a run: `tt doctor` and the engine-environment probes it runs."""
