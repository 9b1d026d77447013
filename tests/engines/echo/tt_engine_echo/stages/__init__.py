"""Stage entry points of the echo engine (`python -m tt_engine_echo.stages.<name> REQUEST`)."""
