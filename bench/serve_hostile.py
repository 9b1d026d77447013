"""Bench: `tt serve`'s server under hostile clients on loopback: idle connections and streams nobody reads.

    <adapter env>/bin/python bench/serve_hostile.py [--idle 2000] [--streams 50] [--max-connections 1000]
        [--probes 20] [--repeats 3] [--server-log PATH]

Loopback only, bounded: builds a tiny Llama-style model locally, starts the
real server (`python -m tt_engine_adapter.serve`, default settings but
`--max-connections`, 8 generating and 64 waiting), then for each repeat:

1. opens `--idle` TCP connections that never send a byte (more than the
   cap: the server closes the longest-idle ones as new ones arrive);
2. starts `--streams` streaming chat requests (300 tokens each, a 4 KB
   receive buffer) that are never read; the model is served under a
   40 000-character name, which every chunk repeats, so each unread answer
   (12 MB) overflows the socket buffers as a long answer of a real model
   would, and the server's writes to it stall;
3. once the streams' generations have ended (their answers unread), while
   all of that is held, times `--probes` `GET /health` requests and
   `--probes` normal chat requests (a fresh connection each), and counts
   their statuses (before the fix the unread streams kept their slots: 429);
4. closes everything and waits until the server has no request left.

Prints one JSON object per repeat (health and chat latency p50 / max,
statuses, how many of the idle connections and streams the server had
closed by the end, the server's open fds and its log size) and a summary
with each repeat's worst /health latency. The load average is recorded
before and after. The server log must stay small: overflow lines are
rate-limited.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def _closed(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


NAME = "m" * 40_000


def _unread_stream(url: str) -> socket.socket:
    body = json.dumps({"model": NAME, "messages": [{"role": "user", "content": "the film was great"}],
                       "stream": True, "max_tokens": 300, "temperature": 0, "stop": ["\u2603"]}).encode()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(_address(url))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return sock


def _timed(call) -> tuple[float, str]:
    start = time.perf_counter()
    try:
        status = str(call().status_code)
    except Exception as exc:  # a refused or timed-out probe is a result, not a crash of the bench
        status = type(exc).__name__
    return time.perf_counter() - start, status


def _repeat(url: str, pid: int, log: Path, idle_count: int, stream_count: int, probes: int) -> dict:
    import httpx

    idle = []
    for _ in range(idle_count):
        try:
            idle.append(socket.create_connection(_address(url), timeout=10))
        except OSError:
            break
    streams = [_unread_stream(url) for _ in range(stream_count)]
    started = time.monotonic()
    while time.monotonic() - started < 600:  # the streams' generations end; their answers stay unread
        text = httpx.get(f"{url}/metrics", timeout=60).text
        if "tt_serve_requests_accepted 0" in text and "tt_serve_requests_running 0" in text:
            break
        time.sleep(0.2)
    generated = time.monotonic() - started
    chat = {"model": NAME, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
    health = [_timed(lambda: httpx.get(f"{url}/health", timeout=10)) for _ in range(probes)]
    chats = [_timed(lambda: httpx.post(f"{url}/v1/chat/completions", json=chat, timeout=60)) for _ in range(probes)]
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    result = {
        "idle_opened": len(idle), "idle_closed_by_server": sum(_closed(s) for s in idle),
        "streams": len(streams), "streams_generated_s": round(generated, 1),
        "streams_closed_by_server": sum(_closed(s) for s in streams),
        "health_p50_s": round(statistics.median(t for t, _ in health), 4),
        "health_max_s": round(max(t for t, _ in health), 4),
        "health_statuses": sorted({s for _, s in health}),
        "chat_p50_s": round(statistics.median(t for t, _ in chats), 4), "chat_max_s": round(max(t for t, _ in chats), 4),
        "chat_statuses": sorted({s for _, s in chats}), "server_fds": fds, "server_log_bytes": log.stat().st_size,
    }
    for sock in idle + streams:
        sock.close()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the next repeat starts from an idle server
        text = httpx.get(f"{url}/metrics", timeout=30).text
        if "tt_serve_requests_accepted 0" in text:
            break
        time.sleep(0.1)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--idle", type=int, default=2000)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--max-connections", type=int, default=1000)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--server-log", type=Path, help="copy the server's log here at the end (with "
                        "PYTHONASYNCIODEBUG=1 it names every callback that held the event loop over 0.1 s)")
    args = parser.parse_args()

    import resource

    from tt_engine_adapter.testing import serving, tiny_model

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # the bench's own sockets
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="tt-hostile-") as tmp:
        model = tiny_model.build(Path(tmp) / "model", hidden=64, layers=2)
        with serving.start(Path(tmp) / "srv", model, model_name=NAME, max_concurrency=8, max_queue=64,
                           max_connections=args.max_connections) as srv:
            results = []
            for repeat in range(args.repeats):
                result = _repeat(srv.url, srv.process.pid, srv.log, args.idle, args.streams, args.probes)
                results.append(result)
                print(json.dumps({"repeat": repeat + 1, **result}), flush=True)
        if args.server_log:
            args.server_log.write_bytes(srv.log.read_bytes())
    print(json.dumps({"summary": True, "idle": args.idle, "streams": args.streams,
                      "max_connections": args.max_connections, "probes": args.probes,
                      "health_max_s": [r["health_max_s"] for r in results],
                      "chat_max_s": [r["chat_max_s"] for r in results],
                      "load_before": [round(x, 2) for x in load_before],
                      "load_after": [round(x, 2) for x in os.getloadavg()]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
