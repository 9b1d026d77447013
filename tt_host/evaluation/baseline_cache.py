"""The cross-run baseline cache: a baseline evaluation already made with the same inputs is reused, not re-run.

A stage that evaluates the `baseline` side (the base model, before any training) gives the same answers
whenever it is asked the same thing, so its outputs are kept under `$TT_HOME/baseline-cache/<key>/` and a
later run with the same key copies them into its own stage folder instead of starting the stage process
(the report says "baseline reused from run X"). The key is the sha256 of what decides the answers:

- the engine, its version and its environment key (the exact packages);
- the stage's name, module, arguments and declared inputs (for an engine on a hub base model: the model
  and its revision, and the generation settings);
- the stage's request as the host would write it, minus what names this run: the system message, the
  held-out and general-regression prompts, the device, and the earlier stages' results the stage can read,
  with every file they name replaced by its content's sha256 and every folder inside the run by a digest of
  its files (so the base model's resolved commit, which a `prefetch` stage returns, is in it,
  and a model trained in the run is known by its bytes).

Each entry also records its `hint`: the same key less the earlier stages' results, which is known before
anything runs; `tt run --dry-run` and `tt pipeline plan` predict a reuse from it (`predict`: "reuse", the run
it came from). The real key still decides: a hint matches only when the stages before it would give the same
outputs too (an unchanged base model commit), which a dry run cannot know.

A stage told to resume (it started in this run folder) never uses the cache. An entry is written whole under
a temporary name, its files fsynced, then renamed (publish_folder); a corrupt or partial one is ignored. Entries
are never changed; deleting the folder only costs re-evaluation.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from tt_stagekit.files import publish_folder
from tt_stagekit.sides import BASELINE_SIDE

from tt_host.canonical import canonical
from tt_host.engine import Engine, Stage
from tt_host.fsutil import make_private_dir, sha256_file, write_json_atomic
from tt_host.models.registry import tt_home
from tt_host.runlayout import REQUEST, RESULT
from tt_host.spec.schema import BehaviorSpec

FOLDER = "baseline-cache"
ENTRY = "cache-entry.json"
RUN_FIELDS = ("run_dir", "stage_dir", "result_path", "spec", "spec_dir", "resume", "fingerprint")


@dataclass(frozen=True)
class CachedBaseline:
    result: dict[str, Any]
    from_run: str


def applies(stage: Stage, resume: bool) -> bool:
    """Whether the stage may take its outputs from the cache (and give them to it)."""
    return stage.evaluates == BASELINE_SIDE and not resume and os.environ.get("TT_NO_BASELINE_CACHE") != "1"


def _portable(value: Any, run_dir: Path) -> Any:
    """An earlier result with each file it names replaced by its content's sha256, and each folder of this run
    by the sha256 of its files' names and contents (a folder outside the run, e.g. a hub snapshot named by its
    commit, stays as named)."""
    if isinstance(value, dict):
        return {key: _portable(item, run_dir) for key, item in value.items()}
    if isinstance(value, list):
        return [_portable(item, run_dir) for item in value]
    if isinstance(value, str) and value.startswith("/"):
        path = Path(value)
        if path.is_file():
            return {"sha256": sha256_file(path)}
        if path.is_dir() and path.is_relative_to(run_dir):
            files = sorted(p for p in path.rglob("*") if p.is_file())
            tree = [[p.relative_to(path).as_posix(), sha256_file(p)] for p in files]
            return {"tree_sha256": hashlib.sha256(canonical(tree).encode()).hexdigest()}
    return value


def cache_key(engine: Engine, env_key: str, stage: Stage, spec: BehaviorSpec, inputs: dict[str, Any],
              request: dict[str, Any], run_dir: Path) -> str:
    """The key of a stage's baseline: `request` is its request.json as the host would write it in `run_dir`."""
    body = {key: value for key, value in request.items() if key not in RUN_FIELDS}
    body["stages"] = {name: _portable(earlier["result"], run_dir) for name, earlier in body["stages"].items()}
    payload = {"engine": engine.name, "engine_version": engine.distribution_version, "env_key": env_key,
               "stage": stage.name, "module": stage.module, "arguments": list(stage.arguments(spec)),
               "inputs": inputs, "request": body}
    return hashlib.sha256(canonical(payload).encode()).hexdigest()


def hint_key(engine: Engine, env_key: str, stage: Stage, spec: BehaviorSpec, inputs: dict[str, Any],
             request: dict[str, Any]) -> str:
    """The key less the earlier stages' results: what a dry run can compute (see the module docstring)."""
    body = {key: value for key, value in request.items() if key not in RUN_FIELDS and key != "stages"}
    payload = {"engine": engine.name, "engine_version": engine.distribution_version, "env_key": env_key,
               "stage": stage.name, "module": stage.module, "arguments": list(stage.arguments(spec)),
               "inputs": inputs, "request": body}
    return hashlib.sha256(canonical(payload).encode()).hexdigest()


def predict(hint: str) -> Optional[str]:
    """The run a cached baseline with this hint came from, None when the cache has none (read only)."""
    root = tt_home() / FOLDER
    try:
        entries = sorted(root.glob(f"*/{ENTRY}"))
    except OSError:
        return None
    for path in entries:
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            result = json.loads((path.parent / "stage" / RESULT).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(entry, dict) and entry.get("hint") == hint and isinstance(result, dict) \
                and result.get("status") == "completed":
            return str(entry.get("run_id"))
    return None


def cache_dir(key: str) -> Path:
    return tt_home() / FOLDER / key


def lookup(key: str, stage_dir: Path, result_path: Path, request: dict[str, Any]) -> Optional[CachedBaseline]:
    """Copy a cached baseline into the stage's folder (with this run's request.json); None on a miss."""
    folder = cache_dir(key)
    try:
        entry = json.loads((folder / ENTRY).read_text(encoding="utf-8"))
        result = json.loads((folder / "stage" / RESULT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or not isinstance(result, dict) or result.get("status") != "completed":
        return None
    shutil.rmtree(stage_dir, ignore_errors=True)
    shutil.copytree(folder / "stage", stage_dir)
    origin = str(Path(str(entry.get("run_dir"))) / str(entry.get("stage")))
    result = _moved(result, origin, str(stage_dir))  # paths into the origin's stage folder name this run's copy
    write_json_atomic(result_path, result)
    write_json_atomic(stage_dir / REQUEST, request)
    return CachedBaseline(result, str(entry.get("run_id")))


def _moved(value: Any, origin: str, here: str) -> Any:
    if isinstance(value, dict):
        return {key: _moved(item, origin, here) for key, item in value.items()}
    if isinstance(value, list):
        return [_moved(item, origin, here) for item in value]
    if isinstance(value, str) and (value == origin or value.startswith(origin + "/")):
        return here + value[len(origin):]
    return value


def store(key: str, stage_dir: Path, run_dir: Path, stage: str, run_id: str, hint: Optional[str] = None) -> None:
    """Keep a completed baseline's stage folder (all but its request) under `key`; an existing entry stays."""
    folder = cache_dir(key)
    if folder.exists():
        return
    make_private_dir(folder.parent)
    partial = folder.parent / f".{key}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        shutil.copytree(stage_dir, partial / "stage",
                        ignore=lambda where, names: [REQUEST] if Path(where) == stage_dir else [])
        write_json_atomic(partial / ENTRY, {"run_id": run_id, "run_dir": str(run_dir), "stage": stage, "hint": hint})
        publish_folder(partial, folder, sync_files=True)  # durable: a crash never leaves an entry of empty files
    except OSError:  # the cache is an optimisation: a full disk or a race with another run only loses it
        shutil.rmtree(partial, ignore_errors=True)
