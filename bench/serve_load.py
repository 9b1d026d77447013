"""Bench: `tt serve`'s server under concurrent clients, continuous batching on against one at a time.

    <adapter env>/bin/python bench/serve_load.py [--clients 1 8 32] [--requests-per-client 5]
        [--hidden 128] [--layers 2] [--max-tokens 16] [--device cpu]

Builds a tiny Llama-style model locally (context 512), starts the real server
(`python -m tt_engine_adapter.serve`) twice with the default queue
(`--max-queue` 64): batching on (`max_concurrency` 16) and batching off
(`max_concurrency` 1). Each client sends its requests back to back (greedy,
`max_tokens` new tokens, every other one streaming). Prints one JSON object
per setting and client count: requests, status counts, answers per second,
p50/p99 latency, decode steps (from `/metrics`), and the load average before
and after, so a noisy machine shows in the record.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _metrics(url: str) -> dict[str, float]:
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {n: float(v) for n, v in (line.split() for line in text.splitlines() if line and not line.startswith("#"))}


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), so a loaded machine can still be compared by work."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run(url: str, pid: int, clients: int, per_client: int, max_tokens: int) -> dict:
    import httpx

    latencies: list[float] = []
    statuses: Counter = Counter()
    lock = threading.Lock()

    def client(k: int) -> None:
        with httpx.Client(timeout=300) as http:
            for i in range(per_client):
                body = {"model": "bench", "temperature": 0, "max_tokens": max_tokens, "stream": bool((k + i) % 2),
                        "messages": [{"role": "user", "content": f"review {k}-{i}: the film was great"}]}
                started = time.perf_counter()
                response = http.post(f"{url}/v1/chat/completions", json=body)
                _ = response.content
                with lock:
                    statuses[response.status_code] += 1
                    if response.status_code == 200:
                        latencies.append(time.perf_counter() - started)

    before = _metrics(url)
    load = os.getloadavg()[0]
    server_cpu, own_cpu = _cpu_seconds(pid), time.process_time()
    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    server_cpu, own_cpu = _cpu_seconds(pid) - server_cpu, time.process_time() - own_cpu
    after = _metrics(url)
    latencies.sort()
    return {
        "clients": clients, "requests": clients * per_client, "status": dict(statuses),
        "answers_per_s": round(statuses[200] / elapsed, 2),
        "p50_s": round(statistics.median(latencies), 3) if latencies else None,
        "p99_s": round(latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 3) if latencies else None,
        "decode_steps": int(after["tt_serve_decode_steps_total"] - before["tt_serve_decode_steps_total"]),
        "prefills": int(after["tt_serve_prefills_total"] - before["tt_serve_prefills_total"]),
        "server_cpu_ms_per_answer": round(1000 * server_cpu / max(1, statuses[200]), 1),
        "client_cpu_ms_per_answer": round(1000 * own_cpu / max(1, statuses[200]), 1),
        "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests-per-client", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    from tt_engine_adapter.testing import serving
    from tt_engine_adapter.testing.tiny_model import build

    with tempfile.TemporaryDirectory(prefix="tt-serve-bench-") as tmp:
        model = build(Path(tmp) / "model", hidden=args.hidden, layers=args.layers)
        for label, batch in (("batching", 16), ("one-at-a-time", 1)):
            with serving.start(Path(tmp) / label, model, model_name="bench", max_concurrency=batch, max_queue=64,
                               device=args.device) as srv:
                for clients in args.clients:
                    row = {"setting": label, **_run(srv.url, srv.process.pid, clients, args.requests_per_client, args.max_tokens)}
                    print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
