"""Prepare: proves the runtime dependency (six) is importable from the engine environment."""

import six  # noqa: F401  (the engine's one locked dependency)

from tt_engine_echo.protocol import emit, read_request, write_json

request = read_request()
if request["spec"]["echo"]["reject_input"]:
    emit("log", level="error", message="echo.reject_input is set: refusing the input")
    raise SystemExit(2)
emit("log", level="info", message=f"{len(request['train_rows'])} training rows")
write_json(request["result_path"], {"status": "completed", "metrics": {"prepare.rows": len(request["train_rows"])},
                                    "outputs": {"six": six.__version__}})
