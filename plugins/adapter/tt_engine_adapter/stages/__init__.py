"""Stage entry points: `python -m tt_engine_adapter.stages.<stage> REQUEST.json`."""
