"""Evaluate: predicts the memorized answer, or echoes the prompt; sees prompts only."""

import json
import os
import time

from tt_engine_echo.protocol import emit, read_request, write_json

request = read_request()
time.sleep(request["spec"].get("echo", {}).get("eval_seconds", 0))
with open(os.path.join(request["stages"]["train"]["result"]["outputs"]["model"], "table.json")) as handle:
    table = json.load(handle)
path = os.path.join(request["stage_dir"], "predictions.jsonl")
with open(path, "w") as handle:
    for row in request["eval_prompts"]:
        assert [m["role"] for m in row["messages"]] == ["system", "user"], "answers must never cross"
        prompt = row["messages"][1]["content"]
        handle.write(json.dumps({"id": row["id"], "prediction": table.get(prompt, prompt)}) + "\n")
emit("progress", step=len(request["eval_prompts"]), total=len(request["eval_prompts"]), unit="prompt", metrics={})
write_json(request["result_path"], {"status": "completed", "predictions": "predictions.jsonl"})
