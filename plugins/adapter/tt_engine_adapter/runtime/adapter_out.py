"""The adapter folder a stage publishes (train, or the tuning stage after it: preference, reinforce): the PEFT
weights, `tt-adapter.json` (how prompts are rendered, and the tuning that made the adapter) and
`artifact-manifest.json`, written to a temp folder, every file fsynced, and renamed into place. Runs in the engine
environment; `publish_adapter` is the one way a stage publishes an adapter (tests/test_adapter_publish.py).

`tt-adapter.json`'s `tuning` (docs/adapter.md): absent for an SFT adapter (the train stage's), else
`tuning_record(stage, settings, ...)`: `{"stage": "preference" | "reinforce", <the spec block's settings>,
"completed_steps": <the stage's steps>, "from": <the SFT adapter folder>}`.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from tt_engine_adapter.runtime import chat, manifest
from tt_stagekit.files import REPLACE, publish_folder

ADAPTER_CONFIG = "adapter_config.json"


def save_weights(model: Any, folder: Path, state_dict: Optional[dict] = None) -> None:
    """PEFT's `save_pretrained` (safetensors) into `folder`, with `target_modules` in adapter_config.json sorted:
    PEFT writes that set in string-hash order, which differs between processes, so two identical runs would
    publish adapters differing in one file. `state_dict`: the LoRA tensors whole (runtime/sharding.py's
    `full_trainable_state` of a sharded model, whose own parameters are this rank's slices)."""
    extra = {} if state_dict is None else {"state_dict": state_dict}
    model.save_pretrained(str(folder), safe_serialization=True, **extra)
    path = Path(folder) / ADAPTER_CONFIG
    config = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
        path.write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")


def tuning_record(stage: str, settings: Any, completed_steps: int, source: Any) -> dict[str, Any]:
    """What `tt-adapter.json` records of a tuning after SFT: the stage, every setting of its spec block (a
    dataclass of runtime/config.py), the steps it completed (its `<stage>.steps` metric) and the SFT adapter it
    started `from`."""
    fields = dataclasses.asdict(settings)
    taken = sorted({"stage", "completed_steps", "from"} & set(fields))
    if taken:  # a setting of that name would be overwritten, or overwrite what the run made
        raise ValueError(f"{type(settings).__name__} has a field named {taken[0]!r}, which tuning_record writes itself")
    return {"stage": stage, **fields, "completed_steps": completed_steps, "from": str(source)}


def publish_adapter(request: Any, base: Mapping[str, Any], tokenizer: Any, padding_choice: chat.Padding,
                    adapter_dir: Path, write_weights: Callable[[Path], None], metrics: Mapping[str, Any],
                    tuning: Optional[Mapping[str, Any]] = None) -> Path:
    """`write_weights(tmp)` fills the folder with the PEFT weights; the rest is written here, the same for
    every stage that makes an adapter. `tuning` (tuning_record; None for SFT) goes to tt-adapter.json."""
    hp = request.hp
    tmp = adapter_dir.parent / f".{adapter_dir.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    write_weights(tmp)
    info = {
        "format": 1,
        "base_model": base,
        "system_message": request.system_message,
        "system_message_sha256": request.system_message_sha256,
        "chat": {"enable_thinking": False, "add_special_tokens": False,
                 "end_of_turn_token": tokenizer.convert_ids_to_tokens(chat.end_of_turn_id(tokenizer)),
                 "pad_token": padding_choice.token, "padding": padding_choice.record()},
        "max_seq_length": hp.max_seq_length,
        "generation": {"do_sample": False, "max_new_tokens": hp.max_new_tokens},
    }
    if tuning is not None:
        info["tuning"] = dict(tuning)
    (tmp / "tt-adapter.json").write_text(json.dumps(info, indent=2) + "\n")
    manifest.write_manifest(tmp, "adapter", base, request.system_message_sha256, extra={"metrics": dict(metrics)})
    publish_folder(tmp, adapter_dir, REPLACE, sync_files=True)  # PEFT's save_pretrained does not fsync its files
    return adapter_dir
