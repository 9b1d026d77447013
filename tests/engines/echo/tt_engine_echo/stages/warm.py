"""What the echo engine's warm stage server imports before it forks stages (TT_STAGE_SERVER=1; docs/operations.md
"Stage server"): its stage protocol module. Every stage is served, so the crash-point tests
(tests/host/runs/test_crash_points.py) run each of its writes through the server too."""

from tt_engine_echo import protocol  # noqa: F401

SERVED_STAGES = (
    "tt_engine_echo.stages.prepare",
    "tt_engine_echo.stages.train",
    "tt_engine_echo.stages.evaluate",
    "tt_engine_echo.stages.baseline",
)
