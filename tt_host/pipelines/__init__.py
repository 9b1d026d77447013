"""Pipeline documents (`tunedtensor.pipeline.json`, the public Pipeline v1 contract): `document` reads, checks,
normalizes and selects steps; `steps` maps them onto an engine's stages and writes what each step leaves.
Running them is `tt run`'s (tt_host.runs.drive), limited to those stages."""
