"""The server against clients that hold what they take: readers that stop, idle sockets, keyless requests, slow
bodies, long stop strings, short keys, and a chat template that refuses a conversation.

Real server subprocesses on loopback (the session's tiny Llama-style model);
every wait is for a state (a metric, a closed socket, a log line), bounded.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tt_engine_adapter.testing import serving
from tt_engine_adapter.testing.serving import metrics, wait_for

PROMPT = [{"role": "user", "content": "the film was great"}]
NEVER = ["\u2603"]  # a stop sequence the tiny model never writes
KEY = "hostile-tests-key-0123"
LONG_NAME = "m" * 40_000  # each streamed chunk names the model: 40 KB a chunk, more than any socket buffers hold


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def _post(url: str, body: bytes, rcvbuf: int = 0, extra: bytes = b"", length: int | None = None) -> socket.socket:
    """A raw POST to the chat route (a small receive buffer if `rcvbuf`), the body sent whole unless `length`."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(60)
    sock.connect(_address(url))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 + extra + b"Content-Length: " + str(len(body) if length is None else length).encode() + b"\r\n\r\n"
                 + body)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    data = bytearray()
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return bytes(data)
        if not chunk:
            return bytes(data)
        data += chunk


def _closed(sock: socket.socket) -> bool:
    """True once the server has closed `sock` (EOF or reset); never blocks."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        sock.setblocking(True)


def _response(sock: socket.socket) -> tuple[bytes, bytes]:
    """One HTTP response read off `sock`: (status line and headers, body of its Content-Length)."""
    data = bytearray()
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head, body


def _metric(url: str, name: str) -> float:
    return metrics(url).get(name, 0.0)


def _stream_unread(url: str) -> socket.socket:
    """A streaming request for a long answer from a client that never reads (a 4 KB receive buffer)."""
    body = {"model": LONG_NAME, "messages": PROMPT, "stream": True, "max_tokens": 300, "temperature": 0,
            "stop": NEVER}
    return _post(url, json.dumps(body).encode(), rcvbuf=4096)


def test_a_stream_that_stops_reading_frees_its_slot_when_generation_ends(tiny_llama, tmp_path):
    """One slot, no queue, a send timeout longer than the test. A client asks for a long stream and never reads:
    once the generation has ended its slot is free (another request is answered, not 429) while its connection
    still holds the unsent answer."""
    with serving.start(tmp_path, tiny_llama, model_name=LONG_NAME, max_concurrency=1, max_queue=0,
                       send_timeout=3600.0) as srv:
        sock = _stream_unread(srv.url)
        try:
            wait_for(lambda: _metric(srv.url, "tt_serve_decode_steps_total") > 0, "the generation to start")
            ended = wait_for(lambda: (m := metrics(srv.url))["tt_serve_requests_running"] == 0
                             and m["tt_serve_requests_accepted"] == 0 and m, "the slot to free", timeout=120)
            assert ended["tt_serve_generated_tokens_total"] > 50, ended  # a long answer, far over the buffers
            quick = httpx.post(f"{srv.url}/v1/chat/completions", timeout=60,
                               json={"model": LONG_NAME, "messages": PROMPT, "max_tokens": 2})
            assert quick.status_code == 200, quick.text
            assert not _closed(sock)  # the answer is still waiting for its reader
        finally:
            sock.close()


@pytest.fixture(scope="module")
def capped(tiny_llama, tmp_path_factory):
    """A server with --max-connections 8, a 1 s send timeout, header and body timeouts longer than the tests
    and a model name that makes each chunk 40 KB."""
    with serving.start(tmp_path_factory.mktemp("capped"), tiny_llama, model_name=LONG_NAME, max_concurrency=1,
                       max_queue=8, max_connections=8, send_timeout=1.0, header_timeout=600.0,
                       body_timeout=600.0) as srv:
        yield srv


def test_a_client_that_reads_nothing_for_the_send_timeout_is_dropped(capped):
    """The unread stream is dropped after the 1 s send timeout: the client gets a cut answer (no [DONE]), its
    generation stops and frees the slot, and the log says why."""
    with _stream_unread(capped.url) as sock:
        wait_for(lambda: "read nothing for 1 s" in capped.log.read_text(), "the server to drop the client",
                 timeout=120)
        received = _read_until_closed(sock)  # read only now: reading earlier is progress, which keeps it
    # (the body is chunked: a whole answer ends "data: [DONE]" then the chunk terminator, so look for it anywhere)
    assert received.startswith(b"HTTP/1.1 200") and b"data: [DONE]" not in received, received[-200:]
    wait_for(lambda: _metric(capped.url, "tt_serve_requests_accepted") == 0, "the slot to free")


def _refused_with_503(url: str) -> bool:
    with socket.create_connection(_address(url), timeout=30) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        head, body = _response(sock)
    return head.startswith(b"HTTP/1.1 503") and b"too many open connections" in body


def test_connections_over_the_cap_close_the_longest_idle_one_and_are_logged_rarely(capped):
    """Eight idle sockets fill the cap; a ninth client is served and the oldest idle socket is closed, the
    others kept; forty more idle sockets each close the longest-idle one (the cap holds) with a log line per
    10 s, not forty."""
    from tt_engine_adapter.serve.protocol import LOG_EVERY

    # the server accepts from its backlog in order: the health check's connection comes after all eight
    idle = [socket.create_connection(_address(capped.url), timeout=30) for _ in range(8)]
    started = time.monotonic()
    logged = capped.log.read_text().count("closed the longest-idle connection")
    # served once the oldest has been idle MIN_IDLE s (a 503 before: no connection counts as idle sooner)
    wait_for(lambda: httpx.get(f"{capped.url}/health", timeout=30).status_code == 200, "a ninth client served")
    wait_for(lambda: _closed(idle[0]), "the longest-idle socket to be closed")
    assert not any(_closed(s) for s in idle[1:])
    more = [socket.create_connection(_address(capped.url), timeout=30) for _ in range(40)]
    wait_for(lambda: all(_closed(s) for s in idle) and sum(not _closed(s) for s in more) <= 8, "the cap to hold")
    # (each of the forty closed one idle for MIN_IDLE s or got 503 itself: either way at most 8 stay open)
    lines = capped.log.read_text().count("closed the longest-idle connection") - logged
    assert 1 <= lines <= 2 + (time.monotonic() - started) / LOG_EVERY, capped.log.read_text()[-3000:]
    for sock in idle + more:
        sock.close()


@contextlib.contextmanager
def _protocol_only(header_timeout: float, max_connections: int | None = None):
    """A real uvicorn on loopback with the hardened protocol and a two-route app (no model), in a thread:
    (its url, the messages its protocol logged)."""
    import asyncio
    import logging
    import threading

    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from tt_engine_adapter.serve.protocol import hardened_protocol

    async def health(request):
        return PlainTextResponse("ok")

    async def upload(request):
        return PlainTextResponse(str(len(await request.body())))

    records: list[str] = []
    app = Starlette(routes=[Route("/health", health), Route("/upload", upload, methods=["POST"])])
    listener = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off",
                                           http=hardened_protocol(header_timeout, 30.0, max_connections)))
    logger = logging.getLogger("uvicorn.error")  # where the server's protocol logs (configured by Config above)
    handler = type("H", (logging.Handler,), {"emit": lambda self, r: records.append(r.getMessage())})()
    logger.addHandler(handler)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[listener])), daemon=True)
    thread.start()
    wait_for(lambda: server.started, "the server to start")
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", records
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        logger.removeHandler(handler)


def test_when_every_connection_is_busy_a_new_one_gets_503():
    """The protocol alone (a two-route app, no model): with --max-connections 3 held by requests whose bodies
    never finish, a new connection gets 503 and is closed, and the cap's log line says so; once they are gone
    a new one is served."""
    with _protocol_only(600.0, 3) as (url, records):
        busy = []
        for _ in range(3):
            sock = socket.create_connection(_address(url), timeout=30)
            sock.sendall(b"POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{")
            busy.append(sock)
        wait_for(lambda: _refused_with_503(url), "a new connection to be refused with 503")
        assert any("refused a connection with 503" in r for r in records), records
        for sock in busy:
            sock.close()
        wait_for(lambda: httpx.get(f"{url}/health", timeout=30).status_code == 200, "a new client to be served")


def test_idle_connections_that_time_out_together_are_logged_rarely():
    """Forty connections that never send their headers are all closed at the header timeout, with one log line
    for them (a line each was a burst of writes on the event loop when a thousand timed out at once)."""
    with _protocol_only(0.5) as (url, records):
        idle = [socket.create_connection(_address(url), timeout=30) for _ in range(40)]
        wait_for(lambda: all(_closed(s) for s in idle), "the header timeout to close every idle connection")
        lines = [r for r in records if "did not send its headers" in r]
        assert len(lines) == 1 and "(1 time" in lines[0], records
        for sock in idle:
            sock.close()


def test_api_key_is_checked_when_headers_arrive_and_short_keys_are_refused(tiny_llama, tmp_path):
    """Without the key every route but /health gets 401 before any body is read, and the connection is closed;
    a key under 16 characters is refused (exit 2) before the model loads."""
    with pytest.raises(serving.StartFailed) as short:
        with serving.start(tmp_path / "short", tiny_llama, api_key="fifteen-chars-k"):
            pass  # accepted: stopped again, never left running
    assert short.value.code == 2 and "at least 16" in short.value.output
    with serving.start(tmp_path / "keyed", tiny_llama, api_key=KEY) as srv:
        assert httpx.get(f"{srv.url}/health").status_code == 200
        for path in ("/v1/models", "/metrics", "/no-such-route"):
            response = httpx.get(f"{srv.url}{path}")
            assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key", path
        sock = _post(srv.url, b"{", length=100_000)  # the body never comes: the answer must not wait for it
        answer = _read_until_closed(sock)  # and the server closes the connection
        sock.close()
        assert answer.startswith(b"HTTP/1.1 401") and b"connection: close" in answer.lower()
        good = httpx.get(f"{srv.url}/v1/models", headers={"Authorization": f"Bearer {KEY}"})
        assert good.status_code == 200


def test_a_slow_body_gets_408_and_a_refusing_template_400(tiny_llama, tmp_path):
    """A body that stops arriving gets 408 after the body timeout; a chat template that refuses a conversation
    (here: any turn asking for brevity; not the system role itself, which a template without one gets folded into
    the first user turn, runtime/chat.py fold_system) answers 400 naming `messages`, its own text only in the log;
    the server goes on."""
    model = tmp_path / "strict-template"
    subprocess.run(["cp", "-r", str(tiny_llama), str(model)], check=True)
    config = json.loads((model / "tokenizer_config.json").read_text())
    template = config.get("chat_template") or (model / "chat_template.jinja").read_text()
    strict = ("{% for m in messages %}{% if 'be brief' in m['content'] %}{{ raise_exception('strict: no brevity "
              "requests') }}{% endif %}{% endfor %}" + template)
    if "chat_template" in config:
        config["chat_template"] = strict
        (model / "tokenizer_config.json").write_text(json.dumps(config))
    else:
        (model / "chat_template.jinja").write_text(strict)
    with serving.start(tmp_path / "srv", model, max_concurrency=1, body_timeout=1.0) as srv:
        with _post(srv.url, b'{"model": ', length=200) as sock:
            head, body = _response(sock)
        assert head.startswith(b"HTTP/1.1 408") and json.loads(body)["error"]["code"] == "request_timeout", head
        refused = httpx.post(f"{srv.url}/v1/chat/completions", timeout=60, json={
            "model": "tiny", "messages": [{"role": "system", "content": "be brief"}, *PROMPT], "max_tokens": 2})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "messages", refused.text
        assert "strict" not in refused.text
        fine = httpx.post(f"{srv.url}/v1/chat/completions", timeout=60,
                          json={"model": "tiny", "messages": PROMPT, "max_tokens": 2})
        assert fine.status_code == 200, fine.text
    assert "strict: no brevity requests" in srv.log.read_text()


def test_the_fd_limit_is_raised_and_the_cap_fitted_under_it():
    """A process started with a soft open-file limit of 512 raises it to the hard limit; a hard limit too small
    for the cap lowers the cap, saying so."""
    code = ("import resource; from tt_engine_adapter.serve.fdlimit import raise_soft_limit;"
            "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE); resource.setrlimit(resource.RLIMIT_NOFILE,"
            " (512, hard)); print(raise_soft_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0], hard)")
    raised, now, hard = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                                       check=True).stdout.split()
    assert raised == now == (hard if int(hard) < 1 << 40 else raised), (raised, now, hard)
    from tt_engine_adapter.serve.fdlimit import RESERVE, fitted_cap

    said: list[str] = []
    assert fitted_cap(1000, 2048, 1 << 20, said.append) == 1000 and not said
    assert fitted_cap(1000, 2048, 2048 + RESERVE + 300, said.append) == 300
    assert "lowered to 300" in said[0] and "ulimit -n" in said[0]


def _soft_open_files(pid: int) -> str:
    """The soft "Max open files" of a running process, as the kernel reports it."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return line.split()[3]
    raise AssertionError(f"/proc/{pid}/limits has no open-file line")


@pytest.mark.skipif(not Path("/proc/self/limits").is_file(), reason="reads the server's limits from /proc (Linux)")
def test_the_server_process_runs_with_its_soft_fd_limit_raised(tiny_llama, tmp_path):
    """A server started with a soft open-file limit of 512 (inherited from this process) runs with the hard one."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 512:
        pytest.skip(f"the hard open-file limit here is {hard}: there is nothing above 512 to raise the soft one to")
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
    try:
        server = serving.start(tmp_path, tiny_llama)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    with server as srv:
        now = _soft_open_files(srv.process.pid)
    if hard == resource.RLIM_INFINITY:
        assert now == "unlimited" or int(now) >= 1 << 20, now
    else:
        assert now == str(hard), (now, hard)


# uvicorn takes the signals over only once its event loop runs: this start sleeps there, after the ready line
SLOW_START = ("import sys, time, uvicorn; run = uvicorn.Server.run; "
              "uvicorn.Server.run = lambda self, *a, **k: (time.sleep(3), run(self, *a, **k))[1]; "
              "from tt_engine_adapter.serve.__main__ import main; sys.exit(main(sys.argv[1:]))")


def test_a_sigterm_right_after_the_ready_line_stops_the_server(tiny_llama, tmp_path):
    """A supervisor that stops the server as soon as it said ready (the fd-limit test above does) is obeyed: the
    signal, arriving before uvicorn has installed its own handlers, stops it after its startup (exit 130) instead
    of being recorded and lost, which left the server serving until killed."""
    ready = tmp_path / "ready.json"
    request = {"model_path": str(tiny_llama), "adapter_path": None, "model_name": "tiny", "system_message": None,
               "host": "127.0.0.1", "port": 0, "max_concurrency": 1, "device": "cpu", "ready_file": str(ready)}
    (tmp_path / "request.json").write_text(json.dumps(request))
    with open(tmp_path / "server.log", "wb") as log:
        process = subprocess.Popen([sys.executable, "-P", "-c", SLOW_START, str(tmp_path / "request.json")],
                                   stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: ready.is_file() or process.poll() is not None, "the ready line", 300)
        assert ready.is_file(), (tmp_path / "server.log").read_text()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 130, (tmp_path / "server.log").read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_stop_sequences_are_capped_in_count_and_length():
    from tt_engine_adapter.serve.request import MAX_STOP, MAX_STOP_CHARS, ApiError, parse_chat

    def body(stop) -> bytes:
        return json.dumps({"model": "m", "messages": PROMPT, "stop": stop}).encode()

    assert parse_chat(body(["x" * MAX_STOP_CHARS] * MAX_STOP), "m", 512).stop == ["x" * MAX_STOP_CHARS] * MAX_STOP
    for stop in (["x" * (MAX_STOP_CHARS + 1)], ["a"] * (MAX_STOP + 1), "y" * 4000):
        with pytest.raises(ApiError) as refused:
            parse_chat(body(stop), "m", 512)
        assert refused.value.status == 400 and refused.value.param == "stop"
