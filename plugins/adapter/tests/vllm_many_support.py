"""Many adapters on one vLLM server (test_vllm_recipe.py): clients in their own processes, and what vLLM ran together.

`ask_together(url, bodies)` starts one client process per body (this file run as a script: the standard library
only, no torch, so each is up in a fraction of a second), waits until every one is ready, then releases them all
at once, so the requests reach vLLM together and its scheduler runs different LoRAs in the same batch. Each
answer is the server's JSON, or `{"error": STATUS, "body": TEXT}` (a name vLLM does not serve gets 404), so a
test compares every answer in one assertion; `chat` is one such request from the caller's own process.
`lora_sets_run_together(url)` reads vLLM's `/metrics`: its gauge `vllm:lora_requests_info` gets a sample for
every set of LoRA names running at one step (label `running_lora_adapters`) and keeps each set it has seen.

    python vllm_many_support.py URL BODY_JSON    # one client: prints READY, waits for a line on stdin, asks
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request

TIMEOUT = 300  # seconds for one answer: vLLM on a loaded 2-core machine


def chat(url: str, body: dict) -> dict:
    """One `/v1/chat/completions` answer's JSON, or `{"error": STATUS, "body": TEXT}`."""
    request = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return {"error": exc.code, "body": exc.read().decode("utf-8", "replace")[:500]}


def ask_together(url: str, bodies: list[dict]) -> list[dict]:
    """Each body's answer, every request sent at the same moment from its own process."""
    clients = [subprocess.Popen([sys.executable, "-I", __file__, url, json.dumps(body)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True) for body in bodies]
    try:
        for client in clients:
            assert client.stdout.readline() == "READY\n", "a client process did not start"
        for client in clients:  # the barrier: every client is waiting on its stdin
            client.stdin.write("go\n")
            client.stdin.flush()
        answers = []
        for client in clients:
            out, _ = client.communicate(timeout=TIMEOUT + 60)
            assert client.returncode == 0, f"a client process exited {client.returncode}"
            answers.append(json.loads(out))
        return answers
    finally:
        for client in clients:
            if client.poll() is None:
                client.kill()
                client.wait()


def lora_sets_run_together(url: str) -> list[set[str]]:
    """Every set of LoRA names vLLM has had running at one step (`vllm:lora_requests_info`)."""
    with urllib.request.urlopen(url + "/metrics", timeout=60) as response:
        text = response.read().decode()
    sets = []
    for line in text.splitlines():
        if line.startswith("vllm:lora_requests_info{"):
            running = re.search(r'running_lora_adapters="([^"]*)"', line)
            if running and running.group(1):
                sets.append(set(running.group(1).split(",")))
    return sets


def _client(url: str, body: str) -> None:
    print("READY", flush=True)
    sys.stdin.readline()
    print(json.dumps(chat(url, json.loads(body))))


if __name__ == "__main__":
    _client(sys.argv[1], sys.argv[2])
