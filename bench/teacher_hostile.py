"""Bench: the synthesis client against a hostile teacher on loopback, one attack at a time.

    .venv/bin/python bench/teacher_hostile.py [--timeout 3] [--retries 5] [--max-tokens 512]

For each attack of tests/hostile_teacher.py (trickle of body, trickle of headers, a 300 MB body, 40 000-deep
JSON, a redirect, Retry-After 300 on every answer, a 429 loop, escape sequences in an error body) the server runs
in its own process and the client (tt_host.synthesis.client.TeacherClient, one request, the settings given) in
another, so the peak RSS measured (the client process's ru_maxrss) is the client's alone. `idle` is a client
process that imports the same modules and sends nothing: the floor. Each case must end within the request's
overall deadline with a TeacherError; the script prints one JSON object (cases, settings, load average) and a
markdown table, and exits 1 when a case did not.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODES = ["trickle_body", "trickle_headers", "huge", "deep", "redirect", "retry_after", "loop429", "escapes"]


def client(url: str, timeout: float, retries: int, max_tokens: int) -> None:
    """In the child: one request; prints {error, seconds, peak_rss_mib, deadline}."""
    from tt_host.synthesis.cache import RequestCache
    from tt_host.synthesis.client import ClientSettings, TeacherClient, TeacherError

    settings = ClientSettings(concurrency=1, timeout_seconds=timeout, max_retries=retries)
    out = {"deadline": settings.overall_seconds, "error": None}
    started = time.monotonic()
    if url != "idle":
        with tempfile.TemporaryDirectory() as folder:
            teacher = TeacherClient(url, "sk-bench-key-0123456789abcdef", RequestCache(Path(folder)), settings,
                                    threading.Event())
            try:
                teacher.complete([{"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                   "max_tokens": max_tokens}])
            except TeacherError as exc:
                out["error"] = str(exc)
            out["cached_entries"] = len(list(Path(folder).rglob("*.json")))
    out["seconds"] = round(time.monotonic() - started, 2)
    out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(out))


def case(mode: str, args: argparse.Namespace) -> dict:
    server = None
    if mode != "idle":
        server = subprocess.Popen([sys.executable, str(REPO / "tests" / "hostile_teacher.py"), mode],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        url = server.stdout.readline().strip()
    else:
        url = "idle"
    try:
        proc = subprocess.run([sys.executable, __file__, "--client", url, "--timeout", str(args.timeout),
                               "--retries", str(args.retries), "--max-tokens", str(args.max_tokens)],
                              capture_output=True, text=True, timeout=600)
    finally:
        if server is not None:
            server.stdin.close()
            server.wait(timeout=30)
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    found["mode"] = mode
    found["ok"] = mode == "idle" or (found["error"] is not None and found["seconds"] <= found["deadline"]
                                    and not found.get("cached_entries"))
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client")
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--retries", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=512)
    args = parser.parse_args()
    if args.client:
        client(args.client, args.timeout, args.retries, args.max_tokens)
        return 0
    cases = [case(mode, args) for mode in ["idle", *MODES]]
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else None
    print(json.dumps({"settings": vars(args), "loadavg": load, "cpus": os.cpu_count(), "cases": cases}, indent=1))
    print("\n| case | wall s | deadline s | peak RSS MiB | ends with |\n|---|---|---|---|---|")
    for found in cases:
        ending = (found["error"] or "-").split("; last: ")[-1].split(". Check")[0][:90]
        print(f"| {found['mode']} | {found['seconds']} | {found['deadline']:g} | {found['peak_rss_mib']} | {ending} |")
    return 0 if all(found["ok"] for found in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
