"""The `synthesize` stage: the host's own stage before training, when a spec has a `synthesis` block.

It runs in the host process (HTTP only, no engine environment). Its fingerprint hashes the teacher's
identity (URL, model, a registered model's weights; never the key) and the settings that decide the rows
(`Synthesis.content_settings`: not concurrency, rate, timeout or retries), plus the compiled instruction
and rows as every stage's do. Stages that train on the rows (`Stage.gets_synthetic_rows`) hash its
fingerprint too. It is replaceable: changed settings re-run it, from the cache where answers match.

Outputs, under `<run>/synthesize/`: `rows.jsonl` (rows.py) and result.json with the metrics
`synthesize.rows` (target), `.kept`, `.proposed`, `.dropped`, `.dropped.<reason>`, `.requests` (sent this
time, retries included), `.cached`, `.retries`, `.retries.<reason>`, `.prompt_tokens`,
`.completion_tokens`. Fewer rows than asked is a note; none at all fails the stage. The cache is `<spec folder>/.tuned-tensor/synthesis-cache/`, shared by every run
of specs in that folder.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from tt_host.engine import Stage
from tt_host.spec.schema import BehaviorSpec
from tt_host.synthesis.cache import RequestCache
from tt_host.synthesis.client import ClientSettings, TeacherClient, TeacherError
from tt_host.synthesis.generate import Generated, generate
from tt_host.synthesis.rows import ROWS_FILE, write_rows
from tt_host.synthesis.teacher import (ResolvedTeacher, TeacherSetupError, approved_key, resolve_teacher,
                                      teacher_identity)

SYNTHESIZE = "synthesize"
CACHE_FOLDER = (".tuned-tensor", "synthesis-cache")


def synthesis_inputs(spec: BehaviorSpec) -> Mapping[str, Any]:
    settings = spec.synthesis
    assert settings is not None
    return {"teacher": teacher_identity(settings.teacher), "settings": settings.content_settings()}


def _enabled(spec: BehaviorSpec) -> bool:
    return spec.synthesis is not None


STAGE = Stage(SYNTHESIZE, "tt_host.synthesis.stage", inputs=synthesis_inputs, needs=(), replaceable=True,
              enabled=_enabled, description="grow training rows with the teacher model")


def is_host_stage(stage: Stage) -> bool:
    return stage is STAGE


def teacher_problem(spec: BehaviorSpec, decisions) -> Optional[str]:
    """Why the synthesize stage could not start (an unreadable TT_TEACHER_ORIGIN, a key that would go over
    plain http to another host, an unregistered model_id), checked before a run writes anything; None when
    it can, or when it is not going to run."""
    if spec.synthesis is None or not any(d.stage == SYNTHESIZE and d.action not in ("reuse", "skip") for d in decisions):
        return None
    try:
        resolve_teacher(spec.synthesis.teacher)
    except TeacherSetupError as exc:
        return str(exc)
    return None


def key_problem(spec: BehaviorSpec) -> Optional[str]:
    """Why the user's key setting cannot be used with this spec's teacher (an unreadable TT_TEACHER_ORIGIN, a
    key that would go over plain http to another host), checked before a run creates its folder; else None."""
    if spec.synthesis is None:
        return None
    try:
        approved_key(spec.synthesis.teacher.url, os.environ)
    except TeacherSetupError as exc:
        return str(exc)
    return None


def cache_dir(spec_path: Path) -> Path:
    return Path(spec_path).parent.joinpath(*CACHE_FOLDER)


def client_for(spec: BehaviorSpec, spec_path: Path, stop: threading.Event,
               warn: Callable[[str], None] = lambda line: None) -> tuple[TeacherClient, ResolvedTeacher]:
    """The teacher's client (its key, when approved for its origin, read from the environment now) and who
    the teacher is (the model name requests carry, where the key came from)."""
    settings = spec.synthesis
    assert settings is not None
    teacher = resolve_teacher(settings.teacher)
    client = TeacherClient(teacher.url, teacher.api_key, RequestCache(cache_dir(spec_path), warn),
                           ClientSettings(settings.concurrency, settings.requests_per_minute,
                                          settings.timeout_seconds, settings.max_retries), stop)
    return client, teacher


def metrics(settings_rows: int, done: Generated, client: TeacherClient) -> dict[str, Any]:
    spent = client.spent
    out: dict[str, Any] = {"synthesize.rows": settings_rows, "synthesize.kept": len(done.rows),
                           "synthesize.proposed": done.proposed, "synthesize.dropped": sum(done.dropped.values()),
                           "synthesize.requests": spent.requests, "synthesize.cached": spent.cached,
                           "synthesize.retries": sum(spent.retries.values()),
                           "synthesize.prompt_tokens": spent.prompt_tokens,
                           "synthesize.completion_tokens": spent.completion_tokens}
    out.update({f"synthesize.dropped.{reason}": count for reason, count in sorted(done.dropped.items())})
    out.update({f"synthesize.retries.{reason}": count for reason, count in sorted(spent.retries.items())})
    return out


def run_synthesis(spec: BehaviorSpec, spec_path: Path, system_message: str, train_rows: list[dict],
                  held_out_prompts: list[str], stage_dir: Path, stop: threading.Event,
                  on_progress: Callable[[int, int], None] = lambda kept, total: None,
                  log: Callable[[str], None] = lambda line: None,
                  announce: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Grow the rows into `stage_dir`; the result.json object. Raises TeacherError, TeacherSetupError, Stopped.
    `announce` (shown on the terminal, even with --json) gets the destination and where the key came from
    before the first request, and every cache entry ignored."""
    settings = spec.synthesis
    assert settings is not None
    client, teacher = client_for(spec, spec_path, stop, announce)
    model = teacher.model
    announce(f"teacher: POST {client.endpoint} (model {teacher.model}); {teacher.key_note}")
    log(f"teacher {model} at {client.endpoint}; {settings.rows} rows wanted; cache {client.cache.folder}")
    done = generate(settings, model, system_message, train_rows, held_out_prompts, client,
                    progress=lambda state: on_progress(len(state.rows), settings.rows))
    found = metrics(settings.rows, done, client)
    dropped = ", ".join(f"{reason} {count}" for reason, count in sorted(done.dropped.items()))
    if not done.rows:
        raise TeacherError(f"the teacher {model} at {client.endpoint} gave no row that could be kept ({done.short}; "
                           f"dropped: {dropped or 'none'}); check its answers with `tt data preview`")
    write_rows(stage_dir / ROWS_FILE, done.rows)
    notes = [f"synthesis: {len(done.rows)} of {settings.rows} rows kept from teacher {model}; "
             f"{found['synthesize.requests']} requests sent ({found['synthesize.cached']} answered from the cache), "
             f"{found['synthesize.prompt_tokens'] + found['synthesize.completion_tokens']} tokens"]
    if done.dropped:
        notes.append(f"synthesis dropped: {dropped}")
    if done.short:
        notes.append(f"synthesis kept fewer rows than synthesis.rows: {done.short}; raise synthesis.max_requests, "
                     "loosen synthesis.checks or show the teacher other examples")
    for note in notes:
        log(note)
    return {"status": "completed", "metrics": found, "notes": notes,
            "outputs": {"rows": ROWS_FILE, "kept": len(done.rows)}}
