"""Stage entry points, run in the engine environment: `python -m tt_engine_foundation.stages.<stage> REQUEST.json`
(and `stages.export`, the Hugging Face export `tt models export` runs)."""
