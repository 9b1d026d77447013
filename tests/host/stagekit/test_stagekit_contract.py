"""tt_stagekit.contract is the one definition of the host-stage contract; tt_stagekit.files.publish_folder and
tt_stagekit.manifest are the one folder publisher and the one manifest writer and verifier."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from tt_stagekit import contract as C
from tt_stagekit import files as F
from tt_stagekit import manifest as M
from tt_stagekit import protocol as P

REPO = Path(__file__).resolve().parents[3]
ROOTS = ["tt_host", "sdk/stagekit/tt_stagekit", "plugins/foundation/tt_engine_foundation",
         "plugins/adapter/tt_engine_adapter"]
CONTRACT = "sdk/stagekit/tt_stagekit/contract.py"


def _modules():
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            if ".venv" not in path.parts:
                yield path.relative_to(REPO).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _assigned(tree: ast.AST):
    """(name, value node) for every assignment to a plain name, tuple targets unpacked."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    yield target.id, node.value
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    for name, value in zip(target.elts, node.value.elts):
                        if isinstance(name, ast.Name):
                            yield name.id, value


def test_exit_codes_have_one_definition():
    found = sorted(f"{name} = {ast.unparse(value)} in {module}" for module, tree in _modules() if module != CONTRACT
                   for name, value in _assigned(tree)
                   if name.startswith("EXIT_") or (isinstance(value, ast.Constant) and value.value == 130))
    assert found == []
    assert (C.EXIT_OK, C.EXIT_FAILED, C.EXIT_INVALID, C.EXIT_INTERRUPTED) == (0, 1, 2, 130)
    from tt_host.engines import runner
    from tt_host.runs import drive

    assert runner.EXIT_INTERRUPTED is drive.EXIT_INTERRUPTED is P.EXIT_INTERRUPTED is C.EXIT_INTERRUPTED
    assert P.InvalidInput is C.InvalidInput and P.StageError is C.StageError and P.Interrupted is C.Interrupted


def test_tt_stagekit_has_no_import_circle():
    graph: dict[str, set[str]] = {}
    for path in (REPO / "sdk/stagekit/tt_stagekit").glob("*.py"):
        deps = graph.setdefault(path.stem, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "tt_stagekit":
                deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tt_stagekit."):
                deps.add(node.module.split(".")[1])
    assert graph["contract"] == set()

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(d == goal or (d not in seen and reaches(d, goal, seen | {d})) for d in graph.get(start, ()))

    assert [m for m in graph if reaches(m, m, {m})] == []


def test_request_fields_are_the_order_the_host_writes_and_read_request_defaults_them(tmp_path):
    assert C.request_fields() == (
        "protocol", "engine", "stage", "run_dir", "stage_dir", "result_path", "spec", "spec_dir", "system_message",
        "system_message_sha256", "train_rows", "eval_prompts", "general_prompts", "device", "resume", "fingerprint",
        "stages")
    assert C.required_request_fields() == ("run_dir", "stage_dir", "result_path", "spec")
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"run_dir": str(tmp_path), "stage_dir": str(tmp_path / "s"),
                                   "result_path": str(tmp_path / "r.json"), "spec": {}}))
    read = P.read_request([str(request)])
    assert read["general_prompts"] == [] and read["stages"] == {} and read["device"] == "auto"
    read["train_rows"].append(1)
    assert C.request_defaults()["train_rows"] == []  # fresh values every time


RESULT = {"status": "completed", "metrics": {"train.loss": 1.5}, "series": {"train.loss": [[1, 2.0]]},
          "outputs": {"adapter": "/abs/a"},
          "artifacts": [{"kind": "adapter", "path": "/abs/a", "manifest": "artifact-manifest.json"}],
          "notes": ["smoke corpus"], "predictions": "predictions.jsonl", "general_predictions": "general.jsonl",
          "_seconds": 3.0}


def test_stage_result_round_trip():
    result = C.StageResult.from_json(RESULT)
    assert result.completed and result.metrics == {"train.loss": 1.5} and result.notes == ("smoke corpus",)
    assert result.artifacts == (C.Artifact(kind="adapter", path="/abs/a", manifest="artifact-manifest.json"),)
    assert result.predictions == "predictions.jsonl" and result.extra == {"_seconds": 3.0}
    assert result.to_json() == RESULT and list(result.to_json()) == list(RESULT)
    assert C.StageResult.from_json(result.to_json()) == result
    # the host's leniency: null or missing fields are empty, non-string notes dropped, an artifact is a model
    lax = C.StageResult.from_json({"status": "completed", "metrics": None, "notes": ["a", 3],
                                   "artifacts": [{"path": "x"}]})
    assert (lax.metrics, lax.notes, lax.artifacts[0].kind, lax.predictions) == ({}, ("a",), "model", None)
    assert not C.StageResult.from_json({}).completed
    with pytest.raises(KeyError, match="path"):
        C.StageResult.from_json({"artifacts": [{"kind": "adapter"}]})


ART = {"kind": "foundation-sft", "path": "/r/sft/model", "manifest": "artifact-manifest.json"}
# what the shipped stages returned as dicts (in their key order), against the StageResult each returns now
STAGE_SHAPES = [
    ({"metrics": {"m": 1}, "predictions": "p.jsonl"}, C.StageResult(metrics={"m": 1}, predictions="p.jsonl")),
    ({"notes": ["cut"], "metrics": {"m": 1}, "outputs": {"tokens": "/t"}},  # token_cache
     C.StageResult(notes=("cut",), metrics={"m": 1}, outputs={"tokens": "/t"})),
    ({"metrics": {"m": 1}, "notes": [], "series": {"l": [[1, 2.0]]}, "outputs": {"model": "/r"}, "artifacts": [ART]},
     C.StageResult(metrics={"m": 1}, series={"l": [[1, 2.0]]}, outputs={"model": "/r"},
                   artifacts=(C.Artifact(**ART),))),  # sft, rl, pretrain, the adapter's train
    ({"metrics": {"m": 1}, "predictions": "p.jsonl", "outputs": {"predictions": "/p"},  # evaluate, chat_eval
      "general_predictions": "g.jsonl", "benchmarks": {"arc": {"acc": 0.5}}, "notes": ["trimmed"]},
     C.StageResult(metrics={"m": 1}, outputs={"predictions": "/p"}, notes=("trimmed",), predictions="p.jsonl",
                   general_predictions="g.jsonl", benchmarks={"arc": {"acc": 0.5}})),
    ({"metrics": {}, "error": "why", "_seconds": 3.0}, C.StageResult(error="why", extra={"_seconds": 3.0})),
]


@pytest.mark.parametrize("returned,record", STAGE_SHAPES)
def test_write_result_writes_a_stage_result_and_a_dict_alike(tmp_path, returned, record):
    """result.json's bytes do not depend on whether a stage returns the StageResult or the dict of it: the
    protocol's defaults in their order, then the optional named fields, then the unnamed ones."""
    as_dict, as_result = tmp_path / "a.json", tmp_path / "b.json"
    P.write_result({"result_path": str(as_dict)}, returned)
    P.write_result({"result_path": str(as_result)}, record)
    assert as_dict.read_bytes() == as_result.read_bytes()
    assert list(json.loads(as_dict.read_text()))[:6] == ["status", "metrics", "series", "outputs", "artifacts",
                                                         "notes"]


SERVE_CASES = [
    (dict(port=70000), "--port must be between 0 and 65535"),
    (dict(max_concurrency=0), "--max-concurrency must be between 1 and 1024"),
    (dict(max_concurrency=1025), "--max-concurrency must be between 1 and 1024"),
    (dict(device="tpu"), "--device must be one of auto, cpu, cuda, mps, not 'tpu'"),
    (dict(max_queue=-1), "--max-queue must be between 0 and 100000"),
    (dict(queue_timeout=0), "--queue-timeout must be a number of seconds between 0 and 86400"),
    (dict(max_batch_tokens=0), "--max-batch-tokens must be at least 1"),
    (dict(default_max_tokens=0), "--default-max-tokens must be at least 1"),
    (dict(max_connections=0), "--max-connections must be between 1 and 1000000"),
    (dict(prefix_cache_mb=-1), "--prefix-cache-mb must be between 0 and 1048576"),
    (dict(prefix_cache_mb=(1 << 20) + 1), "--prefix-cache-mb must be between 0 and 1048576"),
]


@pytest.mark.parametrize("change,message", SERVE_CASES, ids=[next(iter(c)) for c, _ in SERVE_CASES])
def test_serve_bounds_are_one_check_for_tt_serve_and_the_engines_server(change, message, tmp_path):
    """`tt serve`'s options and the adapter's server reading the same values refuse them with one message."""
    from tt_host.models.serve import ServeError, ServeOptions, check_options

    with pytest.raises(ServeError) as host:
        check_options(ServeOptions(request=C.ServeRequest(**change)))
    assert str(host.value) == message and host.value.exit_code == C.EXIT_INVALID
    with pytest.raises(C.InvalidInput) as direct:
        C.ServeRequest(**change).check_bounds()
    assert str(direct.value) == message
    server = _engine_server_check()
    if server is not None:
        (tmp_path / "config.json").write_text("{}")
        with pytest.raises(C.InvalidInput) as engine:
            server({"model_path": str(tmp_path), "model_name": "m", "host": "127.0.0.1", **change})
        assert str(engine.value) == message


def _engine_server_check():
    """The adapter server's request check, when its module imports here (it needs no torch to import)."""
    try:
        from tt_engine_adapter.serve.__main__ import check
    except ImportError:
        return None
    return check


API_KEY_CASES = [  # (key, host, message)
    ("short-key", "127.0.0.1", "the API key is 9 characters long; use at least 16 (make one with `python -c 'import "
     "secrets; print(secrets.token_urlsafe(24))'`) and give it with --api-key-file FILE (the key alone on one line), "
     "the TT_API_KEY environment variable or --api-key KEY"),
    (None, "0.0.0.0", "refusing to listen on 0.0.0.0 without an API key: any address other than loopback needs one, "
     "given with --api-key-file FILE (the key alone on one line), the TT_API_KEY environment variable or --api-key "
     "KEY, and every request must then send 'Authorization: Bearer KEY'"),
]


@pytest.mark.parametrize("key,host,message", API_KEY_CASES, ids=["short", "public-without-key"])
def test_api_key_rule_is_one_check_for_tt_serve_and_the_engines_server(key, host, message, tmp_path, monkeypatch):
    """`tt serve` (exit 2, ServeError) and the adapter's server (the key in TT_SERVE_API_KEY) refuse a short key and
    a public address without one with the stagekit's one message."""
    from tt_host.models.serve import ServeError, ServeOptions, check_options
    from tt_stagekit.addresses import check_api_key

    with pytest.raises(C.InvalidInput) as direct:
        check_api_key(key, host)
    assert str(direct.value) == message
    with pytest.raises(ServeError) as refused:
        check_options(ServeOptions(request=C.ServeRequest(host=host), api_key=key))
    assert str(refused.value) == message and refused.value.exit_code == C.EXIT_INVALID
    check_api_key("k" * 16, host)  # a long enough key is taken anywhere
    check_api_key(None, "::1")  # loopback needs none
    server = _engine_server_check()
    if server is not None:
        (tmp_path / "config.json").write_text("{}")
        if key is None:
            monkeypatch.delenv("TT_SERVE_API_KEY", raising=False)
        else:
            monkeypatch.setenv("TT_SERVE_API_KEY", key)
        with pytest.raises(C.InvalidInput) as engine:
            server({"model_path": str(tmp_path), "model_name": "m", "host": host})
        assert str(engine.value) == message


def test_serve_defaults_are_tt_serves():
    import inspect

    from tt_host.cli.serve import serve
    from tt_host.models.serve import ServeOptions

    request = C.ServeRequest()
    assert ServeOptions().request == request
    assert (request.max_concurrency, request.port, request.max_queue, request.queue_timeout) == (8, 8000, 64, 60.0)
    request.check_bounds()
    # every `tt serve` option that is a request field takes the field's default
    options = {name: param.default.default for name, param in inspect.signature(serve).parameters.items()
               if hasattr(param.default, "default")}
    fields = {f.name: f.default for f in dataclasses.fields(C.ServeRequest)}
    shared = sorted(set(options) & set(fields))
    assert shared == ["default_max_tokens", "device", "host", "max_batch_tokens", "max_concurrency",
                      "max_connections", "max_queue", "max_resident", "port", "prefix_cache_mb", "queue_timeout"]
    assert {name: options[name] for name in shared} == {name: fields[name] for name in shared}


def test_tt_serve_writes_its_one_serve_request_and_the_server_reads_it_back(tmp_path):
    """The request file is `ServeRequest.to_json()` of the request the options built (the model filled in, the API
    key never in it); parsed as the engine's server parses it, it is the same request."""
    from tt_host.engine import SERVE_HF
    from tt_host.models.references import ResolvedModel
    from tt_host.models.serve import ServeOptions, build_request
    from tt_stagekit.stageconfig import parse

    key = "a-key-long-enough-0123"
    options = ServeOptions(request=C.ServeRequest(host="0.0.0.0", port=0, allowed_hosts=("box.lan",), max_queue=3),
                           api_key=key)
    model = ResolvedModel(model_id="m-1", path=tmp_path / "model", kind="adapter", form=SERVE_HF, engine="adapter",
                          system_message="Be brief.")
    request = build_request(model, options, lambda line: None, tmp_path / "ready.json")
    written = request.to_json()
    assert written == {
        "model_path": str(tmp_path / "model"), "adapter_path": None, "model_name": "m-1",
        "system_message": "Be brief.", "host": "0.0.0.0", "port": 0, "max_concurrency": 8, "device": "auto",
        "ready_file": str(tmp_path / "ready.json"), "allowed_hosts": ["box.lan"], "default_max_tokens": None,
        "header_timeout": 10.0, "max_queue": 3, "queue_timeout": 60.0, "max_batch_tokens": None,
        "max_connections": 1000, "send_timeout": 30.0, "body_timeout": 30.0, "default_temperature": None,
        "default_top_p": None, "served_models": [], "max_resident": None, "activation_file": None,
        "host_channel": False, "prefix_cache_mb": 256}
    assert list(written) == [f.name for f in dataclasses.fields(C.ServeRequest)]
    assert key not in json.dumps(written)
    assert parse(C.ServeRequest, json.loads(json.dumps(written)), "serve request") == request
    many = dataclasses.replace(request, served_models=(C.ServedModel(name="m-1", path="/v/1", manifest_sha256="a" * 64,
                                                                     version=1, system_message="Be brief."),),
                               max_resident=2, host_channel=True)
    assert parse(C.ServeRequest, json.loads(json.dumps(many.to_json())), "serve request") == many


@pytest.mark.parametrize("policy", [F.REFUSE, F.REPLACE, F.KEEP])
def test_publish_folder_policies_for_an_existing_target(tmp_path, policy):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old")
    built = tmp_path / ".out.tmp"
    built.mkdir()
    (built / "sub").mkdir()
    (built / "sub" / "new.txt").write_text("new")
    if policy == F.REFUSE:
        with pytest.raises(FileExistsError):
            F.publish_folder(built, target, policy, sync_files=True)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the built folder is removed
        assert (target / "old.txt").read_text() == "old"
        return
    aside = F.publish_folder(built, target, policy, sync_files=True)
    assert (target / "sub" / "new.txt").read_text() == "new" and not (target / "old.txt").exists()
    if policy == F.REPLACE:
        assert aside is None and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    else:
        assert aside is not None and aside.name.startswith("out.replaced-") and (aside / "old.txt").read_text() == "old"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out", aside.name]


def test_publish_folder_without_a_target_just_renames(tmp_path):
    built = tmp_path / ".x.tmp"
    built.mkdir()
    (built / "a").write_text("a")
    assert F.publish_folder(built, tmp_path / "x") is None
    assert [p.name for p in tmp_path.iterdir()] == ["x"]
    with pytest.raises(ValueError):
        F.publish_folder(tmp_path / "x", tmp_path / "y", "overwrite")


def test_manifest_writer_bytes_and_verifier(tmp_path, monkeypatch):
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "b.bin").write_bytes(b"bb")
    (folder / "a.txt").write_text("a")
    (folder / ".cache").mkdir()
    (folder / ".cache" / "x").write_text("x")
    written = M.write_manifest(folder, "adapter", "adapter", fields={"system_message_sha256": "s"},
                               extra={"metrics": {"m": 1}, "kind": "export"}, files=M.folder_files(folder, {".cache"}))
    assert list(written) == ["format", "kind", "engine", "files", "system_message_sha256", "created", "metrics"]
    assert written["kind"] == "export" and [f["path"] for f in written["files"]] == ["a.txt", "sub/b.bin"]
    text = (folder / M.MANIFEST).read_text()
    assert text == json.dumps(written, indent=2, ensure_ascii=False) + "\n"
    # .cache/x is not listed, so the one verifier names it; without it the folder verifies
    assert M.verify(folder)[1] == [(".cache/x", "not listed in the manifest")]
    (folder / ".cache" / "x").unlink()
    assert M.verify(folder) == (written, [])
    (folder / "a.txt").write_text("b")
    b, a = hashlib.sha256(b"b").hexdigest(), hashlib.sha256(b"a").hexdigest()
    assert M.verify(folder)[1] == [("a.txt", f"sha256 differs from the manifest (the file was changed): {b}, recorded {a}")]
    (folder / "a.txt").write_text("longer")
    assert M.verify(folder)[1] == [("a.txt", "size 6 != recorded 1")]
    (folder / M.MANIFEST).write_text("{")
    assert M.verify(folder)[1][0][1].startswith("invalid JSON")


def test_the_manifest_name_has_one_definition():
    found = sorted(module for module, tree in _modules() for name, _ in _assigned(tree) if name == "MANIFEST")
    assert found == ["sdk/stagekit/tt_stagekit/manifest.py"]
    from tt_host.models import registry

    assert registry.MANIFEST is M.MANIFEST
