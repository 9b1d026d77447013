"""Bench: `tt serve`'s server under concurrent clients, continuous batching on against one at a time.

    <adapter env>/bin/python bench/serve_load.py [--clients 1 8 32] [--requests-per-client 5] [--repeats 5]
        [--hidden 128] [--layers 2] [--max-tokens 16] [--device cpu] [--threads N]

Builds a tiny Llama-style model locally (context 512), starts the real server
(`python -m tt_engine_adapter.serve`) twice with the default queue
(`--max-queue` 64): batching on (`max_concurrency` 16) and batching off
(`max_concurrency` 1); both run for the whole bench (an idle one uses no CPU).
Each client sends its requests back to back (greedy, `max_tokens` new tokens,
every other one streaming). For each client count the two settings run
`--repeats` times, alternating (which goes first alternates too), so a hiccup
of the machine moves one repeat, not the figure. Prints one JSON object per
run: requests, status counts, answers per second, p50/p99 latency, decode
steps and prefill passes (from `/metrics`), the server's CPU per answer
(whole process, and split into its event loop and all other threads),
the bench clients' CPU per answer, and the load average before and after, so
a noisy machine shows in the record. Then one summary object per client
count: each repeat's answers per second for both settings, each repeat's
ratio and the median ratio.
"""

from __future__ import annotations

import argparse
import contextlib
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


def _thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """Each live thread's (name, CPU seconds) of a process."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        found[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
    return found


def _by_thread(pid: int, before: dict, after: dict, total: float, answers: int) -> dict[str, float]:
    """The server's CPU ms per answer: its event loop (the main thread) and all its other threads (the
    model's scheduler thread, torch's threads, request workers, threads that ended)."""
    used = after[pid][1] - before.get(pid, ("", 0.0))[1] if pid in after else 0.0
    return {"event_loop": round(1000 * used / max(1, answers), 1),
            "other_threads": round(1000 * (total - used) / max(1, answers), 1)}


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
    server_cpu, own_cpu, threads_before = _cpu_seconds(pid), time.process_time(), _thread_cpu(pid)
    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    server_cpu, own_cpu = _cpu_seconds(pid) - server_cpu, time.process_time() - own_cpu
    by_thread = _by_thread(pid, threads_before, _thread_cpu(pid), server_cpu, statuses[200])
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
        "server_cpu_ms_per_answer_by_thread": by_thread,
        "client_cpu_ms_per_answer": round(1000 * own_cpu / max(1, statuses[200]), 1),
        "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests-per-client", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None,
                        help="the servers' torch threads (TT_NUM_THREADS); default: the server's own rule")
    args = parser.parse_args()
    if args.threads is not None:
        os.environ["TT_NUM_THREADS"] = str(args.threads)

    from tt_engine_adapter.testing import serving
    from tt_engine_adapter.testing.tiny_model import build

    settings = (("batching", 16), ("one-at-a-time", 1))
    with tempfile.TemporaryDirectory(prefix="tt-serve-bench-") as tmp, contextlib.ExitStack() as stack:
        model = build(Path(tmp) / "model", hidden=args.hidden, layers=args.layers)
        servers = {label: stack.enter_context(serving.start(Path(tmp) / label, model, model_name="bench",
                                                            max_concurrency=batch, max_queue=64, device=args.device))
                   for label, batch in settings}
        for clients in args.clients:
            rates: dict[str, list[float]] = {label: [] for label, _ in settings}
            for repeat in range(args.repeats):
                for label, _ in (settings if repeat % 2 == 0 else settings[::-1]):
                    srv = servers[label]
                    row = {"setting": label, "repeat": repeat + 1,
                           **_run(srv.url, srv.process.pid, clients, args.requests_per_client, args.max_tokens)}
                    rates[label].append(row["answers_per_s"])
                    print(json.dumps(row), flush=True)
            ratios = [round(b / o, 2) if o else None for b, o in zip(rates["batching"], rates["one-at-a-time"])]
            known = [r for r in ratios if r is not None]
            print(json.dumps({"summary": clients, "batching_answers_per_s": rates["batching"],
                              "one_at_a_time_answers_per_s": rates["one-at-a-time"], "ratios": ratios,
                              "median_ratio": round(statistics.median(known), 2) if known else None,
                              "load_now": round(os.getloadavg()[0], 2)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
