"""Baseline: the untrained base model, which echoes every prompt; sees prompts only."""

import json
import os

from tt_engine_echo.protocol import emit, read_request, write_json

request = read_request()
path = os.path.join(request["stage_dir"], "predictions.jsonl")
with open(path, "w") as handle:
    for row in request["eval_prompts"]:
        assert [m["role"] for m in row["messages"]] == ["system", "user"], "answers must never cross"
        handle.write(json.dumps({"id": row["id"], "prediction": row["messages"][1]["content"]}) + "\n")
emit("progress", step=len(request["eval_prompts"]), total=len(request["eval_prompts"]), unit="prompt", metrics={})
write_json(request["result_path"], {"status": "completed", "predictions": "predictions.jsonl"})
