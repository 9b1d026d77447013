"""Bench: the server's prompt prefix reuse (`--prefix-cache-mb`) on against off, side by side, on a real base.

    <adapter env>/bin/python bench/serve_prefix.py [--base FOLDER] [--clients 1 4] [--requests-per-client 4]
        [--repeats 3] [--max-tokens 8] [--system-repeat 3] [--threads N]

Starts the real server (`python -m tt_engine_adapter.serve`) twice on the base (default: `scripts/real-base`,
SmolLM2-135M-Instruct) with one compiled system prompt (a review-rating instruction, `--system-repeat` times
its guidelines): prefix reuse on (`prefix_cache_mb` 256) and off (0); both run for the whole bench (an idle one
uses no CPU). Each server first answers one request (torch warmed; the reuse server keeps the start, as it
would after its first request). Each client streams its requests back to back (greedy, every request its own
review after the shared system prompt). For each client count the two settings run `--repeats` times,
alternating (which goes first alternates too). Prints one JSON object per run: time to first token (the first
chunk with text, or the finish: median and p90), requests per second, prefill passes and the prefix counters
from `/metrics`, the load average before and after; then one summary per client count with each repeat's
figures side by side and the median ratios (off / on for time to first token, on / off for requests/s).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
GUIDELINES = ("Read the whole review before you answer. Sarcasm counts as negative. A review that praises the "
              "actors but calls the film boring is negative. A review that only describes the plot is positive "
              "when it recommends the film. Ignore spelling mistakes and the reviewer's star rating. ")
SYSTEM = "Rate the movie review: answer thumbs up or thumbs down, then one short reason. "
REVIEWS = ["a warm, funny and moving film", "the plot was dull and slow, I nearly left", "great acting",
           "I walked out after twenty minutes, bored", "a masterpiece of quiet tension", "meh",
           "the soundtrack alone is worth the ticket", "two hours I will never get back"]


def _metrics(url: str) -> dict[str, float]:
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {n: float(v) for n, v in (line.split() for line in text.splitlines() if line and not line.startswith("#"))}


def _ask(http, url: str, text: str, max_tokens: int) -> tuple[float, float]:
    """(seconds to the first text or finish chunk, seconds to the end) of one streamed request."""
    body = {"model": "bench", "temperature": 0, "max_tokens": max_tokens, "stream": True,
            "messages": [{"role": "user", "content": text}]}
    started, first = time.perf_counter(), None
    with http.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if first is None and line.startswith("data: {"):
                choice = (json.loads(line[6:]).get("choices") or [{}])[0]
                if choice.get("delta", {}).get("content") or choice.get("finish_reason"):
                    first = time.perf_counter() - started
    return first if first is not None else float("nan"), time.perf_counter() - started


def _run(url: str, clients: int, per_client: int, max_tokens: int) -> dict:
    import httpx

    ttft: list[float] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        with httpx.Client(timeout=600) as http:
            for i in range(per_client):
                first, _ = _ask(http, url, f"review {k}-{i}: {REVIEWS[(k * per_client + i) % len(REVIEWS)]}",
                                max_tokens)
                with lock:
                    ttft.append(first)

    before, load = _metrics(url), os.getloadavg()[0]
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))  # every client's requests, back to back
    elapsed = time.perf_counter() - started
    after = _metrics(url)
    ttft.sort()
    delta = {k.removeprefix("tt_serve_"): int(after[k] - before[k]) for k in after
             if k.startswith("tt_serve_prefix_") and k.endswith("_total") or k == "tt_serve_prefills_total"}
    return {"clients": clients, "requests": len(ttft), "requests_per_s": round(len(ttft) / elapsed, 3),
            "ttft_median_s": round(statistics.median(ttft), 3),
            "ttft_p90_s": round(ttft[min(len(ttft) - 1, int(0.9 * len(ttft)))], 3), **delta,
            "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default=None, help="a Hugging Face model folder (default: scripts/real-base)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--requests-per-client", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--system-repeat", type=int, default=3, help="times the guidelines repeat in the system "
                                                                     "prompt (its length)")
    parser.add_argument("--threads", type=int, default=None, help="the servers' torch threads (TT_NUM_THREADS)")
    args = parser.parse_args()
    if args.threads is not None:
        os.environ["TT_NUM_THREADS"] = str(args.threads)
    base = args.base or subprocess.run([str(REPO / "scripts" / "real-base")], capture_output=True, text=True,
                                       check=True, env={**os.environ, "TT_REAL_BASE_PYTHON": sys.executable}
                                       ).stdout.strip().splitlines()[-1]
    import httpx

    from tt_engine_adapter.testing import serving

    system = SYSTEM + GUIDELINES * args.system_repeat
    settings = (("reuse", 256), ("whole", 0))
    with tempfile.TemporaryDirectory(prefix="tt-serve-prefix-") as tmp, contextlib.ExitStack() as stack:
        servers = {label: stack.enter_context(serving.start(
            Path(tmp) / label, base, model_name="bench", system_message=system, max_concurrency=max(args.clients),
            max_queue=64, prefix_cache_mb=mb)) for label, mb in settings}
        for label, srv in servers.items():
            with httpx.Client(timeout=600) as http:
                _ask(http, srv.url, "warm up", args.max_tokens)
        print(json.dumps({"base": str(base), "system_prompt_chars": len(system), "threads": args.threads,
                          "load_now": round(os.getloadavg()[0], 2)}), flush=True)
        for clients in args.clients:
            rows: dict[str, list[dict]] = {label: [] for label, _ in settings}
            for repeat in range(args.repeats):
                for label, _ in (settings if repeat % 2 == 0 else settings[::-1]):
                    row = {"setting": label, "repeat": repeat + 1,
                           **_run(servers[label].url, clients, args.requests_per_client, args.max_tokens)}
                    rows[label].append(row)
                    print(json.dumps(row), flush=True)
            on, off = rows["reuse"], rows["whole"]
            print(json.dumps({
                "summary": clients,
                "ttft_median_s": {"reuse": [r["ttft_median_s"] for r in on], "whole": [r["ttft_median_s"] for r in off]},
                "requests_per_s": {"reuse": [r["requests_per_s"] for r in on],
                                   "whole": [r["requests_per_s"] for r in off]},
                "ttft_ratio_whole_over_reuse": round(statistics.median(
                    o["ttft_median_s"] / r["ttft_median_s"] for r, o in zip(on, off)), 2),
                "rps_ratio_reuse_over_whole": round(statistics.median(
                    r["requests_per_s"] / o["requests_per_s"] for r, o in zip(on, off)), 2),
                "load_now": round(os.getloadavg()[0], 2)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
