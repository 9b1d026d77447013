"""Many adapters on one base in one server (docs/serving.md "Many adapters").

In-process scheduler, driven one iteration at a time: four tiny adapters, trained once for this module to
answer four different words (`testing.tiny_adapters`), answer in ONE mixed batch (tt's LoRA bank,
`serve/lora_bank.py`: one gathered product for the mixed rows) exactly as each does served alone on the same base
by the single-adapter server (`ChatModel(base, adapter)`: `PeftModel.from_pretrained`, one adapter), token for token, each with its own system message and stop strings. Residency: `--max-adapters 2` keeps two
loaded, evicts the least recently used, reloads on demand (slots reused); an adapter whose files no longer match
the pinned manifest, or that the bank cannot apply (a real DoRA adapter), is never loaded (its request gets 503,
the others answer). The catalog: ids, `ID@n`, prefixes, and
`active` read from the activation history at each request.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from pathlib import Path

import pytest

from tt_engine_adapter.serve.adapters import Catalog, Residency
from tt_engine_adapter.serve.batching import DONE, Job, Scheduler
from tt_engine_adapter.serve.generation import ChatModel, Delta, Finish
from tt_engine_adapter.serve.many import Many
from tt_engine_adapter.serve.request import ApiError, ChatParams, apply_system_message
from tt_engine_adapter.testing.recording import Recording
from tt_engine_adapter.testing.tiny_adapters import SYSTEMS, WORDS
from tt_stagekit.contract import ServedModel

PROMPTS = ["the film was great", "honestly the plot is dull", "the music felt lovely to me"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(base folder, four adapter folders), trained once (seconds)."""
    from tt_engine_adapter.testing.tiny_adapters import build as build_adapters
    from tt_engine_adapter.testing.tiny_model import build

    root = tmp_path_factory.mktemp("many")
    base = build(root / "base", arch="llama", hidden=64, layers=2)
    return base, build_adapters(base, root / "adapters", count=4)


def _spec(folder: Path, k: int, version: int = 1) -> ServedModel:
    digest = hashlib.sha256((folder / "artifact-manifest.json").read_bytes()).hexdigest()
    return ServedModel(name=f"tuned-{WORDS[k]}", path=str(folder), manifest_sha256=digest, version=version,
                         system_message=SYSTEMS[k])


def _job(model: ChatModel, text: str, system: str, adapter=None, stop=("\u2603",)) -> tuple[Job, list]:
    params = ChatParams(messages=[{"role": "user", "content": text}], temperature=0, max_tokens=8, stop=list(stop))
    prompt, max_new = model.plan(params, apply_system_message(params.messages, system))
    items: list = []
    return Job(params, prompt, max_new, items.append, threading.Event(), time.monotonic() + 600,
               adapter=adapter), items


def _drain(scheduler: Scheduler) -> None:
    scheduler._iteration()
    while scheduler.running or scheduler._pending:
        scheduler._iteration()


def _answer(items: list) -> tuple:
    text = "".join(i.text for i in items if isinstance(i, Delta))
    finish = [(i.reason, i.completion_tokens) for i in items if isinstance(i, Finish)]
    errors = [(i.status, i.code) for i in items if isinstance(i, ApiError)]
    return text, finish, errors, items[-1] is DONE


def _alone(base: Path, folder: Path, k: int, stop=("\u2603",)) -> list[tuple]:
    """Each prompt answered by adapter k served alone (its own server's model: base + that one adapter)."""
    model = ChatModel(str(base), str(folder), device="cpu")
    out = []
    for text in PROMPTS:
        scheduler = Recording(model, max_batch=1, max_batch_tokens=model.context_length)
        job, items = _job(model, text, SYSTEMS[k], stop=stop)
        scheduler.submit(job)
        _drain(scheduler)
        out.append((scheduler.tokens[id(job)], _answer(items)))
    return out


@pytest.fixture(scope="module")
def alone(trained):
    base, folders = trained
    return [_alone(base, folder, k) for k, folder in enumerate(folders)]


def _mixed(base: Path, specs: list[ServedModel], limit=None) -> tuple[Recording, Catalog, Residency, ChatModel]:
    model = ChatModel(str(base), device="cpu")
    catalog = Catalog(specs)
    residency = Residency(model, limit, catalog)
    residency.ensure(catalog.entries()[:limit or len(specs)], set())
    return Recording(model, max_batch=16, max_batch_tokens=16 * model.context_length,
                     residency=residency), catalog, residency, model


def test_four_adapters_in_one_mixed_batch_answer_token_for_token_as_each_alone(trained, alone):
    base, folders = trained
    answers = {k: [a for _, a in alone[k]] for k in range(4)}
    assert len({tuple(a[0] for a in answers[k]) for k in range(4)}) == 4, answers  # the adapters really differ
    scheduler, catalog, _, model = _mixed(base, [_spec(folder, k) for k, folder in enumerate(folders)])
    jobs = []
    for i, text in enumerate(PROMPTS):  # interleaved: every batch mixes the four adapters
        for k in range(4):
            entry = catalog.find(f"tuned-{WORDS[k]}")
            jobs.append((k, i, *_job(model, text, entry.spec.system_message, entry)))
    for _, _, job, _ in jobs:
        scheduler.submit(job)
    before = model.metrics.snapshot()
    _drain(scheduler)
    assert model.metrics.snapshot()["tt_serve_batch_rows_max"] >= 12 > before.get("tt_serve_batch_rows_max", 0)
    for k, i, job, items in jobs:
        tokens, answer = alone[k][i]
        assert scheduler.tokens[id(job)] == tokens, (WORDS[k], PROMPTS[i])
        assert _answer(items) == answer, (WORDS[k], PROMPTS[i])


def test_each_row_keeps_its_own_stop_strings_in_a_mixed_batch(trained, alone):
    base, folders = trained
    scheduler, catalog, _, model = _mixed(base, [_spec(folder, k) for k, folder in enumerate(folders)])
    full = {k: alone[k][0][1][0] for k in range(4)}
    cut = {0: full[0][2:4], 1: None}  # adapter 0 stops at a piece of its own answer; adapter 1 has no stop
    jobs = []
    for k in (0, 1):
        entry = catalog.find(f"tuned-{WORDS[k]}")
        stop = (cut[k],) if cut[k] else ("\u2603",)
        jobs.append((k, *_job(model, PROMPTS[0], entry.spec.system_message, entry, stop=stop)))
    for _, job, _ in jobs:
        scheduler.submit(job)
    _drain(scheduler)
    text0, finish0, _, _ = _answer(jobs[0][2])
    assert cut[0] and text0 == full[0][:full[0].index(cut[0])] and finish0[0][0] == "stop"
    assert _answer(jobs[1][2]) == alone[1][0][1]


def test_max_adapters_evicts_the_least_recently_used_and_reloads_it_on_demand(trained, alone, capfd):
    base, folders = trained
    scheduler, catalog, residency, model = _mixed(base, [_spec(folder, k) for k, folder in enumerate(folders)],
                                                  limit=2)
    assert [e.spec.name for e in residency.resident] == ["tuned-alpha", "tuned-bravo"]
    order = [2, 0, 3, 1, 2, 2, 0]
    jobs = []
    for k in order:  # all submitted together: at most two adapters run at once, the others wait their turn
        entry = catalog.find(f"tuned-{WORDS[k]}")
        jobs.append((k, *_job(model, PROMPTS[1], entry.spec.system_message, entry)))
    for _, job, _ in jobs:
        scheduler.submit(job)
    _drain(scheduler)
    for k, job, items in jobs:
        assert _answer(items) == alone[k][1][1], WORDS[k]
    assert len(residency.resident) == 2 and residency.evictions >= 3
    assert residency.bank.occupied == [0, 1]  # the two slots, reused by every load after an eviction
    logged = capfd.readouterr().err
    assert logged.index("adapter tuned-bravo@1 evicted (least recently used)") < logged.index("tuned-charlie@1 loaded")
    assert "adapter tuned-charlie@1 loaded; resident 2 of 2 (--max-adapters)" in logged


def _alpha_answers_and_delta_gets_503(scheduler, catalog, residency, model, alone) -> None:
    """tuned-alpha (loaded) and tuned-delta (refused) asked together: alpha answers as alone, delta gets 503."""
    good, bad = catalog.find("tuned-alpha"), catalog.find("tuned-delta@1")
    jobs = [_job(model, PROMPTS[0], good.spec.system_message, good),
            _job(model, PROMPTS[0], bad.spec.system_message, bad)]
    for job, _ in jobs:
        scheduler.submit(job)
    _drain(scheduler)
    assert _answer(jobs[0][1]) == alone[0][0][1]
    assert _answer(jobs[1][1]) == ("", [], [(503, "adapter_unavailable")], True)
    assert [e.spec.name for e in residency.resident] == ["tuned-alpha"] and residency.bank.occupied == [0]


def test_an_adapter_failing_its_manifest_check_is_never_loaded(trained, alone, tmp_path):
    import shutil

    base, folders = trained
    broken = tmp_path / "broken"
    shutil.copytree(folders[3], broken)
    specs = [_spec(folders[0], 0), _spec(broken, 3)]
    scheduler, catalog, residency, model = _mixed(base, specs, limit=1)
    weights = broken / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)  # same size, other bytes
    _alpha_answers_and_delta_gets_503(scheduler, catalog, residency, model, alone)


@pytest.fixture(scope="module")
def dora(trained, tmp_path_factory) -> Path:
    """A real DoRA adapter of the base, with its manifest: its magnitudes are not applied by the bank."""
    import torch
    from peft import LoraConfig, get_peft_model

    from tt_engine_adapter.runtime import manifest, model_source

    base, _ = trained
    folder = tmp_path_factory.mktemp("dora") / "adapter"
    peft = get_peft_model(model_source.load_model(str(base), "cpu", torch.float32),
                          LoraConfig(r=4, use_dora=True, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    peft.save_pretrained(str(folder), safe_serialization=True)
    manifest.write_manifest(folder, "adapter", model_source.fetch(str(base)),
                            hashlib.sha256(SYSTEMS[3].encode()).hexdigest())
    return folder


def test_an_adapter_the_bank_cannot_apply_is_never_loaded_and_its_requests_get_503(trained, alone, dora, capfd):
    base, folders = trained
    scheduler, catalog, residency, model = _mixed(base, [_spec(folders[0], 0), _spec(dora, 3)], limit=1)
    _alpha_answers_and_delta_gets_503(scheduler, catalog, residency, model, alone)
    assert "adapter tuned-delta@1 not loaded: tuned-delta: DoRA is set (use_dora: true)" in capfd.readouterr().err


def test_a_server_start_names_an_adapter_the_bank_cannot_apply_though_it_is_not_loaded_yet(trained, dora, tmp_path):
    import dataclasses

    from tt_engine_adapter.testing import serving

    base, folders = trained
    served = [dataclasses.asdict(_spec(folders[0], 0)), dataclasses.asdict(_spec(dora, 3))]
    with pytest.raises(serving.StartFailed) as failed:  # --max-adapters 1: the DoRA one would load only when asked
        serving.start(tmp_path, base, served_models=served, max_resident=1)
    assert failed.value.code == 2, failed.value.output
    assert "tuned-delta: DoRA is set (use_dora: true)" in failed.value.output and "tt serve ID" in failed.value.output


def test_admin_refuses_an_adapter_the_bank_cannot_apply_with_422_and_serves_nothing_new(trained, dora, capfd):
    base, folders = trained
    _, catalog, residency, _ = _mixed(base, [_spec(folders[0], 0)], limit=1)
    many = Many(catalog, residency, None)  # POST /admin/adapters once the host resolved the name
    with pytest.raises(ApiError) as caught:
        many.admit(_spec(dora, 3))
    assert (caught.value.status, caught.value.code) == (422, "adapter_unsupported")
    assert [e.reference for e in catalog.entries()] == ["tuned-alpha@1"]
    assert "POST /admin/adapters: tuned-delta cannot be served here: DoRA is set" in capfd.readouterr().err
    assert many.admit(_spec(folders[1], 1))[1] == "added"  # plain LoRA is served


def test_catalog_names_ids_versions_prefixes_and_the_active_model(tmp_path):
    specs = [ServedModel(name="capitals-2026-adapter", path="/a", manifest_sha256="1" * 64, version=1),
             ServedModel(name="capitals-2026-adapter", path="/b", manifest_sha256="2" * 64, version=2),
             ServedModel(name="cities-2026-adapter", path="/c", manifest_sha256="3" * 64, version=1)]
    history = tmp_path / "activations.jsonl"
    catalog = Catalog(specs, str(history))
    assert catalog.find("capitals-2026-adapter").spec.path == "/b"  # an id alone: its highest served version
    assert catalog.find("capitals-2026-adapter@1").spec.path == "/a"
    assert catalog.find("cit").spec.path == "/c" and catalog.find("cap@1").spec.path == "/a"
    for name, words in [("c", "begins several"), ("zzz", "not served"), ("capitals-2026-adapter@3", "not served")]:
        with pytest.raises(ApiError) as caught:
            catalog.find(name)
        assert caught.value.status == 404 and words in caught.value.message
    with pytest.raises(ApiError, match="no model is active"):
        catalog.find("active")

    def record(**fields):
        with open(history, "a") as handle:
            handle.write(json.dumps(fields) + "\n")

    record(action="activate", model="cities-2026-adapter", version=1, manifest_sha256="3" * 64)
    assert catalog.find("active").spec.path == "/c"
    record(action="activate", model="capitals-2026-adapter", version=1, manifest_sha256="1" * 64)
    assert catalog.find("active").spec.path == "/a"
    record(action="rollback", model="cities-2026-adapter")
    assert catalog.find("active").spec.path == "/c"
    record(action="activate", model="capitals-2026-adapter", version=2, manifest_sha256="f" * 64)  # other bytes
    with pytest.raises(ApiError, match="not served here"):
        catalog.find("active")
    # a same-name reload with another digest replaces the entry: a new uid, never the old weights
    old = catalog.find("capitals-2026-adapter@2")
    entry, how = catalog.add(ServedModel(name="capitals-2026-adapter", path="/b2", manifest_sha256="f" * 64,
                                           version=2))
    assert how == "replaced" and entry.uid != old.uid and catalog.find("active") is entry
    assert catalog.add(entry.spec)[1] == "unchanged"


def test_a_batch_of_one_adapter_runs_the_bank_s_single_adapter_pass_and_answers_as_alone(trained, alone):
    base, folders = trained
    scheduler, catalog, residency, model = _mixed(base, [_spec(folder, k) for k, folder in enumerate(folders)])
    bank, passes = residency.bank, []
    rows = bank.rows

    @contextlib.contextmanager
    def recording(slots):  # what each pass ran as: its rows' one slot, or None when mixed
        with rows(slots):
            passes.append(bank.current.single)
            yield

    bank.rows = recording
    for k in (2, 0, 3, 3, 1):  # one request at a time: every pass names one adapter (PEFT's ops, no gather)
        entry = catalog.find(f"tuned-{WORDS[k]}")
        job, items = _job(model, PROMPTS[2], entry.spec.system_message, entry)
        passes.clear()
        scheduler.submit(job)
        _drain(scheduler)
        assert passes and set(passes) == {residency.slot(entry)}, (WORDS[k], passes)
        assert scheduler.tokens[id(job)] == alone[k][2][0] and _answer(items) == alone[k][2][1], WORDS[k]


def test_the_recorder_never_hands_one_job_the_tokens_of_another_whose_id_it_reused(trained):
    """CPython gives a freed job's id to a later object, and the recorder (`testing/recording.py`) keys by id: a
    CI run once read a dropped alpha job's 6 tokens before delta's 4. What a reused id leaves is planted under
    each new job's id; the recorder still holds exactly that job's own picks, and keeps every job it recorded."""
    base, _ = trained
    model = ChatModel(str(base), device="cpu")
    scheduler = Recording(model, max_batch=1, max_batch_tokens=model.context_length)
    for i in range(3):
        job, items = _job(model, PROMPTS[i], SYSTEMS[i])
        scheduler.tokens[id(job)] = [-1] * 6  # an earlier job's picks under the same id
        scheduler.submit(job)
        _drain(scheduler)
        (finish,) = _answer(items)[1]
        assert len(scheduler.tokens[id(job)]) == finish[1] + (finish[0] == "stop"), scheduler.tokens[id(job)]
        assert -1 not in scheduler.tokens[id(job)]
    assert len(set(scheduler.tokens)) == 3  # (ids held: none reused while the recorder lives)
