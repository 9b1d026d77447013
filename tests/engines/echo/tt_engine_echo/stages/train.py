"""Train: 'memorizes' the training rows over N steps, checkpointing so SIGTERM and resume work."""

import hashlib
import json
import os
import shutil
import signal
import sys
import time

from tt_engine_echo.protocol import StopFlag, emit, read_request, write_json

request = read_request()
config = request["spec"]["echo"]
stop = StopFlag()
if config.get("ignore_stop"):  # a stage that never stops when asked: only the host's kill ends it
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
state_path = os.path.join(request["stage_dir"], "state.json")
step = 0
if request["resume"] and os.path.exists(state_path):
    with open(state_path) as handle:
        step = json.load(handle)["step"]
    emit("log", level="info", message=f"resuming at step {step}")
losses = []
while step < config["steps"]:
    time.sleep(config["step_seconds"])
    step += 1
    if config.get("fail_at_step") == step:
        emit("log", level="error", message=f"failing on purpose at step {step}")
        sys.exit(1)
    loss = 1.0 / step
    losses.append([step, loss])
    write_json(state_path, {"step": step})
    emit("progress", step=step, total=config["steps"], unit="step", metrics={"loss": loss})
    if stop.requested:
        emit("log", level="warning", message=f"stopped at step {step}; state saved")
        sys.exit(130)

model_dir = os.path.join(request["stage_dir"], "model")
shutil.rmtree(model_dir, ignore_errors=True)  # a model folder a crash left half-written is made anew
os.makedirs(model_dir, exist_ok=True)
table = {row["messages"][1]["content"]: row["messages"][2]["content"] for row in request["train_rows"]}
data = json.dumps(table, sort_keys=True).encode()
with open(os.path.join(model_dir, "table.json"), "wb") as handle:
    handle.write(data)
manifest = {"format": 1, "kind": "echo", "engine": "echo",
            "files": [{"path": "table.json", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}],
            "system_message_sha256": request["system_message_sha256"]}
write_json(os.path.join(model_dir, "artifact-manifest.json"), manifest)
emit("artifact", kind="echo", path=model_dir)
write_json(request["result_path"], {
    "status": "completed", "metrics": {"train.steps": step, "train.final_loss": 1.0 / step},
    "series": {"train.loss": losses}, "outputs": {"model": model_dir},
    "artifacts": [{"kind": "echo", "path": model_dir, "manifest": "artifact-manifest.json"}],
})
