"""`tt data preview SPEC`: what synthesis would send and a few rows it would keep, before the run spends.

It shows the teacher (URL, model, where the key comes from or why none is sent, never the key), the
first request for new inputs and the answer request of one training input exactly as they would be sent,
and `sample` rows. With `sample` 0 nothing is sent: the rows shown are those the cache already answers.
Otherwise it asks the teacher for that many rows through the cache the run uses (the run reuses them):
about `ceil(sample / inputs_per_request)` input requests and `sample` answers, more when answers are dropped.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tt_host.spec.compiler import CompiledSpec
from tt_host.spec.schema import BehaviorSpec
from tt_host.synthesis.client import Stopped, TeacherClient
from tt_host.synthesis.generate import Generated, generate
from tt_host.synthesis.prompts import answer_request, inputs_request, training_pairs
from tt_host.synthesis.stage import cache_dir, client_for, metrics

CACHED_ROWS_SHOWN = 3


class _CacheOnly(TeacherClient):
    """Answers from the cache; stops at the first request it would have to send."""

    def _fetch_all(self, bodies, missing, results) -> None:
        raise Stopped


def preview(spec: BehaviorSpec, spec_path: Path, compiled: CompiledSpec, sample: int) -> dict[str, Any]:
    settings = spec.synthesis
    assert settings is not None
    pairs = training_pairs(compiled.train_rows)
    stop = threading.Event()
    warnings: list[str] = []
    client, resolved = client_for(spec, spec_path, stop, warnings.append)
    model = resolved.model
    if not sample:
        client = _CacheOnly(client.endpoint.removesuffix("/chat/completions"), None, client.cache, client.settings, stop)
    held_out = [row["messages"][-2]["content"] for row in compiled.eval_rows]
    done = Generated()
    try:
        generate(settings.model_copy(update={"rows": sample or CACHED_ROWS_SHOWN}), model, compiled.system_message,
                 compiled.train_rows, held_out, client, out=done)
    except Stopped:  # cache only: as far as the cache answers
        pass
    teacher = settings.teacher
    return {
        "spec_path": str(spec_path),
        "teacher": {"url": client.endpoint, "model": model, "model_id": teacher.model_id,
                    "key": resolved.key_note},
        "rows": settings.rows, "request_budget": settings.request_budget, "cache": str(cache_dir(spec_path)),
        "inputs_request": inputs_request(model, compiled.system_message, pairs, settings, 0),
        "answer_request": answer_request(model, compiled.system_message, pairs[0][0] if pairs else "", settings),
        "sample_rows": done.rows,
        "sample": metrics(sample, done, client),
        "requests_sent": client.spent.requests,
        "cache_warnings": warnings,
    }
