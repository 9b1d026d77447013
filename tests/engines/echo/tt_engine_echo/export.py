"""Export an echo model: `python -m tt_engine_echo.export REQUEST.json` (declared in the plugin's ModelKind).

REQUEST holds `source` (the model folder), `out` (a new folder), `model_id`, `system_message` and
`system_message_sha256`, as for every engine's export. Writes `table.json`, `tt-export.json` (where it came
from, the system message) and `artifact-manifest.json` of kind `echo-export`. Exit 0, or 2 on bad input.
"""

import hashlib
import json
import os
import sys
import time

from tt_engine_echo.protocol import emit, read_request, write_json

# tests of what a person sees during a long export: TT_ECHO_EXPORT_SECONDS=N works N seconds before writing
WORK_SECONDS = float(os.environ.get("TT_ECHO_EXPORT_SECONDS") or 0)


def _sha256(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


request = read_request()
source, out = request.get("source"), request.get("out")
if not isinstance(source, str) or not os.path.isfile(os.path.join(source, "table.json")):
    emit("log", level="error", message=f"export request: source {source!r} is not an echo model folder")
    sys.exit(2)
if not isinstance(out, str) or os.path.exists(out):
    emit("log", level="error", message=f"export request: out {out!r} must be a new folder")
    sys.exit(2)
time.sleep(WORK_SECONDS)
os.makedirs(out)
with open(os.path.join(source, "table.json"), "rb") as handle:
    table = handle.read()
with open(os.path.join(out, "table.json"), "wb") as handle:
    handle.write(table)
info = {"model_id": request.get("model_id"), "system_message": request.get("system_message"),
        "source": {"path": source, "manifest_sha256": _sha256(os.path.join(source, "artifact-manifest.json"))}}
write_json(os.path.join(out, "tt-export.json"), info)
files = [{"path": name, "size": os.path.getsize(os.path.join(out, name)), "sha256": _sha256(os.path.join(out, name))}
         for name in ("table.json", "tt-export.json")]
write_json(os.path.join(out, "artifact-manifest.json"),
           {"format": 1, "kind": "echo-export", "engine": "echo", "files": files,
            "system_message_sha256": request.get("system_message_sha256")})
emit("log", level="info", message=f"exported {source} to {out}")
