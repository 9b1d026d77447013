"""Stage entry points, run in the engine environment: `python -m tt_engine_adapter.stages.<stage> REQUEST.json`
(and `stages.export`, the merged export `tt models export --merged` runs)."""
