"""`tt serve A B C D`: four registered adapters of one base in one server, live changes, the admin endpoint.

One module fixture: the tiny llama base, four tiny adapters trained on it to answer four different words
(`tt_engine_adapter.testing.tiny_adapters`, seconds) and registered in the test's TT_HOME, and ONE `tt serve`
of the four (`--max-adapters 3`, an API key), started as users start it. Real processes throughout: the
clients are subprocesses sending HTTP requests while other `tt` processes activate and roll back.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from adapter_support import TT_BIN, engine_python, engine_run, ready_event, shared_tiny_model, tt, tt_env

WORDS = ["alpha", "bravo", "charlie", "delta"]  # tt_engine_adapter.testing.tiny_adapters.WORDS
KEY = "k" * 24
REGISTER = r"""
import json, sys
from pathlib import Path
from tt_host.models import registry
folder, spec_name, message = sys.argv[1], sys.argv[2], sys.argv[3]
entry = registry.register(Path(folder), run_id="r1", run_dir=Path(folder).parent, spec_name=spec_name,
                          engine="adapter", kind="adapter", system_message=message)
print(json.dumps({"id": entry["id"], "version": entry["version"] if "version" in entry else None}))
"""
CLIENT = r"""
import json, sys, time, urllib.request, urllib.error
url, key, out, stop = sys.argv[1:5]
with open(out, "a") as log:
    while True:
        try:
            open(stop).close()
            break
        except FileNotFoundError:
            pass
        body = json.dumps({"model": "active", "messages": [{"role": "user", "content": "the film was great"}],
                           "temperature": 0, "max_tokens": 8}).encode()
        request = urllib.request.Request(url + "/v1/chat/completions", body, {
            "Content-Type": "application/json", "Authorization": "Bearer " + key})
        start = time.time()
        try:
            with urllib.request.urlopen(request, timeout=120) as reply:
                status, answer = reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            status, answer = exc.code, json.loads(exc.read() or b"{}")
        log.write(json.dumps({"start": start, "end": time.time(), "status": status,
                              "model": answer.get("model"),
                              "text": (answer.get("choices") or [{}])[0].get("message", {}).get("content"),
                              "error": answer.get("error")}) + "\n")
        log.flush()
"""


def _register(home: Path, folder: Path, spec_name: str, message: str) -> str:
    proc = subprocess.run([sys.executable, "-c", REGISTER, str(folder), spec_name, message], env=tt_env(home),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["id"]


def _post(url: str, path: str, body: dict, key: str | None = KEY) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(url + path, json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(request, timeout=300) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw.startswith(b"{") else {}


def _get(url: str, path: str, key: str | None = KEY) -> dict:
    request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())


def _ask(url: str, model: str) -> tuple[int, dict]:
    return _post(url, "/v1/chat/completions", {"model": model, "temperature": 0, "max_tokens": 8,
                                               "messages": [{"role": "user", "content": "the film was great"}]})


def _start(home: Path, *args: str) -> tuple[subprocess.Popen, dict]:
    process = subprocess.Popen([TT_BIN, "serve", *args, "--port", "0", "--json", "--api-key-file",
                                str(home / "key.txt")], env=tt_env(home), cwd=home, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    return process, ready_event(process, "tt serve", timeout=600)


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    home = tmp_path_factory.mktemp("serve-many")
    (home / "key.txt").write_text(KEY + "\n")
    python = engine_python(home)
    with shared_tiny_model(tmp_path_factory) as base:
        out = engine_run(python, home, "-m", "tt_engine_adapter.testing.tiny_adapters", str(base),
                         str(home / "adapters"), "--count", "4")
        folders = [Path(p) for p in json.loads(out.stdout.strip().splitlines()[-1])]
        ids = [_register(home, folder, f"tuned-{WORDS[k]}",
                         json.loads((folder / "tt-adapter.json").read_text())["system_message"])
               for k, folder in enumerate(folders)]
        process, ready = _start(home, *ids, "--max-adapters", "3")
        try:
            yield {"home": home, "ids": ids, "folders": folders, "url": ready["url"], "ready": ready,
                   "python": python, "process": process}
        finally:
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=90) == 130


def test_one_server_serves_four_adapters_by_id_prefix_and_version(many):
    url, ids = many["url"], many["ids"]
    assert many["ready"]["models"] == [f"{i}@1" for i in ids]
    listed = _get(url, "/v1/models")["data"]
    assert [(m["id"], m["root"], m["version"]) for m in listed] == [(f"{i}@1", i, 1) for i in ids]
    for k, model_id in enumerate(ids):
        for name in (model_id, f"{model_id}@1", model_id[:len("tuned-") + 3]):  # id, ID@n, a unique prefix
            status, answer = _ask(url, name)
            assert status == 200 and answer["model"] == f"{model_id}@1", (name, answer)
            assert answer["choices"][0]["message"]["content"] == WORDS[k], (name, answer)
    status, answer = _ask(url, "tuned-")  # a prefix of all four
    assert status == 404 and "begins several" in answer["error"]["message"]
    health = _get(url, "/health", key=None)
    assert health["adapters"]["served"] == 4 and health["adapters"]["resident"] == 3
    assert health["adapters"]["max_resident"] == 3 and health["adapters"]["evictions"] >= 1


def test_an_activation_during_load_switches_active_with_no_failed_or_mixed_request(many, tmp_path):
    url, ids, home = many["url"], many["ids"], many["home"]
    stop = tmp_path / "stop"
    assert tt(home, "models", "activate", ids[0], "--force", "--json").returncode == 0
    clients = [subprocess.Popen([sys.executable, "-c", CLIENT, url, KEY, str(tmp_path / f"client-{i}.jsonl"),
                                 str(stop)]) for i in range(4)]
    switches = []  # (the tt command's start, its end, the adapter active after it)
    try:
        time.sleep(2)
        for target in (1, 2, 3):
            started = time.time()
            assert tt(home, "models", "activate", ids[target], "--force", "--json").returncode == 0
            switches.append((started, time.time(), target))
            time.sleep(2)
        started = time.time()
        assert tt(home, "models", "rollback", "--json").returncode == 0  # back to ids[2]
        switches.append((started, time.time(), 2))
        time.sleep(2)
    finally:
        stop.write_text("")
        for client in clients:
            client.wait(timeout=300)
    records = [json.loads(line) for i in range(4) for line in (tmp_path / f"client-{i}.jsonl").read_text().splitlines()]
    assert len(records) >= 20
    assert [r for r in records if r["status"] != 200] == []  # none failed
    by_model = {f"{model_id}@1": WORDS[k] for k, model_id in enumerate(ids)}
    assert [r for r in records if r["text"] != by_model.get(r["model"])] == []  # none got another's answer
    for record in records:  # each answered by what was active when it was sent (between two switches)
        before = [s for s in switches if s[1] < record["start"]]
        during = [s for s in switches if s[0] <= record["end"] and s[1] >= record["start"]]
        if not during:
            expected = before[-1][2] if before else 0
            assert record["model"] == f"{ids[expected]}@1", (record, switches)
    assert len({r["model"] for r in records}) == 4


def test_admin_loads_a_new_version_pinned_by_its_digest_and_refuses_what_is_not_registered(many, tmp_path):
    import shutil

    url, ids, home, folders = many["url"], many["ids"], many["home"], many["folders"]
    # version 2 of the first id: the second adapter's weights registered under the first one's name
    source = folders[0]
    shutil.copy(folders[1] / "adapter_model.safetensors", source / "adapter_model.safetensors")
    engine_run(many["python"], home, "-c", "import json, sys; from tt_engine_adapter.runtime import manifest; "
               "f = sys.argv[1]; m = json.load(open(f + '/artifact-manifest.json')); "
               "manifest.write_manifest(f, 'adapter', m['base_model'], m['system_message_sha256'])", str(source))
    assert _register(home, source, "tuned-alpha", "You are tuned adapter alpha. Answer with one word.") == ids[0]
    status, answer = _post(url, "/admin/adapters", {"model": ids[0]}, key=None)
    assert status == 401
    status, answer = _post(url, "/admin/adapters", {"model": str(folders[2])})
    assert status in (400, 404) and "registered" in json.dumps(answer)
    status, answer = _post(url, "/admin/adapters", {"model": ids[0]})
    assert status == 200 and answer["model"] == f"{ids[0]}@2" and answer["status"] == "added", answer
    assert _ask(url, ids[0])[1]["choices"][0]["message"]["content"] == "bravo"  # the new weights, never stale
    assert _ask(url, f"{ids[0]}@1")[1]["choices"][0]["message"]["content"] == "alpha"
    assert _post(url, "/admin/adapters", {"model": ids[0]})[1]["status"] == "unchanged"
    # a registered version whose files changed is never loaded
    version_two = Path(json.loads((home / "tt-home" / "models" / f"{ids[3]}.json").read_text())["path"])
    weights = version_two / "adapter_model.safetensors"
    weights.chmod(0o644)
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    status, answer = _post(url, "/admin/adapters", {"model": ids[3]})
    assert status == 422 and "verification" in answer["error"]["message"]


def test_adapters_on_another_base_and_bad_model_files_are_refused_at_start(many, tmp_path):
    home, ids, folders = many["home"], many["ids"], many["folders"]
    other = tmp_path / "other-base-adapter"
    import shutil

    shutil.copytree(folders[2], other)
    engine_run(many["python"], home, "-c", "import json, sys; from tt_engine_adapter.runtime import manifest; "
               "f = sys.argv[1]; m = json.load(open(f + '/artifact-manifest.json')); "
               "b = dict(m['base_model'], fingerprint='0' * 64); "
               "manifest.write_manifest(f, 'adapter', b, m['system_message_sha256'])", str(other))
    foreign = _register(home, other, "foreign", "x")
    proc = tt(home, "serve", ids[0], foreign, "--port", "0")
    assert proc.returncode == 2 and foreign in proc.stderr and "another `tt serve`" in proc.stderr, proc.stderr
    listed = tmp_path / "models.txt"
    listed.write_text(f"# tuned\n{ids[0]}\n\n{ids[1]} extra\n")
    proc = tt(home, "serve", "--models-from", listed, "--port", "0")
    assert proc.returncode == 2 and f"{listed}:4" in proc.stderr, proc.stderr
    listed.write_text(f"{ids[0]}\nno-such-model\n")
    proc = tt(home, "serve", "--models-from", listed, "--port", "0")
    assert proc.returncode == 2 and f"{listed}:2" in proc.stderr and "no-such-model" in proc.stderr, proc.stderr
