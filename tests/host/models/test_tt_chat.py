"""`tt chat MODEL` (tt_host.cli.chat, tt_host.models.chat): a real `tt chat` process reads the conversation from its
stdin, starts `tt serve` for the model (loopback, random key), keeps the turns (`/reset` clears them), prints the
answers cleaned of control characters and stops the server at `/exit`, end of input and Ctrl-C. `--url` talks to a
server already running. Host only: the echo test engine, whose server answers `/echo-request` with the request it
got and the system message it was started with.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess

from conftest import TT, echo_spec, write_spec

SYSTEM = "Answer with the capital city."


def _model(tt: TT, tmp_path) -> str:
    code, out = tt.json("run", write_spec(tmp_path, echo_spec(steps=2)), "--resume", tmp_path / "run")
    assert code == 0, out
    return out["report"]["models"][0]["id"]


def _port_closed(url: str) -> bool:
    host, port = re.match(r"http://([^:/]+):(\d+)", url).groups()
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError:
        return True
    return False


def _started(process: subprocess.Popen, banner: str = "") -> str:
    """The URL `tt chat` announces on stderr once its server is ready (that line holding `banner`)."""
    seen = []
    for line in process.stderr:
        seen.append(line)
        if found := re.search(r" at (http://127\.0\.0\.1:\d+)/v1 ", line):
            assert banner in line, line
            return found.group(1)
    raise AssertionError(f"tt chat never announced its server (exit {process.wait()}): {''.join(seen)}")


def test_a_piped_conversation_keeps_its_turns_and_every_ending_stops_the_server(tt, tmp_path):
    model = _model(tt, tmp_path)
    chat = tt.popen("chat", model[:-8], "--max-tokens", "7", stdin=subprocess.PIPE)
    url = _started(chat, "(greedy, as the evaluation decoded (--temperature T samples); /reset")
    lines = ["Capital of country 3?", "/echo-request", "/reset", "/echo-request", "\x1b[31mred\x1b]0;title\x07", "",
             "/exit", "never sent"]
    out, err = chat.communicate("\n".join(lines) + "\n", timeout=120)
    assert chat.returncode == 0, err
    answers = out.splitlines()
    assert len(answers) == 4 and answers[0] in ("City 3", "Capital of country 3?"), out
    first, after_reset = json.loads(answers[1]), json.loads(answers[2])
    assert first["system_message"] == SYSTEM and first["max_tokens"] == 7, first
    # no --temperature: the evaluation's greedy decoding, said in the banner (the server's own default is 1.0)
    assert first["temperature"] == 0 and after_reset["temperature"] == 0, first
    assert first["messages"] == [{"role": "user", "content": "Capital of country 3?"},
                                 {"role": "assistant", "content": answers[0]},
                                 {"role": "user", "content": "/echo-request"}], first
    assert after_reset["messages"] == [{"role": "user", "content": "/echo-request"}], after_reset
    assert answers[3] == "[31mred]0;title" and "\x1b" not in out and "\x07" not in out, out
    assert "(conversation cleared)" in err and _port_closed(url)

    chat = tt.popen("chat", model, "--no-spec-prompt", stdin=subprocess.PIPE)
    url = _started(chat)
    out, err = chat.communicate("/echo-request\n", timeout=120)  # then end of input
    assert chat.returncode == 0 and json.loads(out)["system_message"] is None, (out, err)
    assert _port_closed(url)

    chat = tt.popen("chat", model, stdin=subprocess.PIPE)
    url = _started(chat)
    chat.send_signal(signal.SIGINT)  # Ctrl-C at the prompt
    out, err = chat.communicate(timeout=120)
    assert chat.returncode == 130 and "Traceback" not in err, err
    assert _port_closed(url)


def test_url_talks_to_a_running_server_and_refusals_exit_2(tt, tmp_path):
    model = _model(tt, tmp_path)
    key = "a-key-of-sixteen-or-more"
    server = TT({**tt.env, "TT_API_KEY": key}, tt.cwd).popen("serve", model, "--port", "0", "--json")
    try:
        ready = next(json.loads(line) for line in server.stdout if '"ready"' in line)
        asked = {**tt.env, "TT_API_KEY": key}
        chat = TT(asked, tt.cwd)("chat", "--url", ready["url"] + "/v1", "--temperature", "0.7",
                                 input="/echo-request\n", timeout=120)
        assert chat.returncode == 0, chat.stderr
        request = json.loads(chat.stdout)
        assert request["system_message"] == SYSTEM and request["temperature"] == 0.7, request
        assert "sampling at temperature 0.7 (the evaluation decoded greedily" in chat.stderr, chat.stderr
        wrong = TT({**tt.env, "TT_API_KEY": "not-the-key-at-all"}, tt.cwd)("chat", "--url", ready["url"], input="hi\n")
        assert wrong.returncode == 1 and "401" in wrong.stderr, wrong.stderr
        other = TT(asked, tt.cwd)("chat", "no-such-name", "--url", ready["url"], input="hi\n")
        assert other.returncode == 2 and model in other.stderr, other.stderr
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)
    for args, expected in ((("chat",), "give MODEL"), (("chat", "zz-no-such"), "no registered model"),
                           (("chat", model[:-1] + "x"), f"did you mean {model!r}?"),  # a typo: the closest id
                           (("chat", "--url", "ftp://x"), "give the server's address"),
                           (("chat", model, "--api-key-file", "k"), "goes with --url")):
        done = tt(*args, input="hi\n", timeout=120)
        assert done.returncode == 2 and expected in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)


def test_url_never_follows_a_redirect_so_the_api_key_stays_with_the_address_given(tt):
    """A server at --url that redirects (to another port: another origin) gets the key it was given; the other
    address never hears from tt chat, whatever the redirect's code."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    heard: list[tuple[str, str]] = []

    class Elsewhere(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            heard.append((self.path, self.headers.get("Authorization") or ""))
            body = json.dumps({"data": [{"id": "stolen"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    elsewhere = ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)
    code = [0]

    class Redirecting(Elsewhere):
        def do_GET(self):  # noqa: N802
            self.send_response(code[0])
            self.send_header("Location", f"http://127.0.0.1:{elsewhere.server_port}{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

    redirecting = ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
    for server in (elsewhere, redirecting):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for code[0] in (301, 302, 307, 308):
            done = TT({**tt.env, "TT_API_KEY": "a-key-of-sixteen-or-more"}, tt.cwd)(
                "chat", "--url", f"http://127.0.0.1:{redirecting.server_port}", input="hi\n", timeout=120)
            assert done.returncode == 2 and f"answered {code[0]} redirecting to" in done.stderr, done.stderr
            assert "follows no redirect" in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert heard == [], heard  # never asked: neither the key nor the request went there
    finally:
        for server in (elsewhere, redirecting):
            server.shutdown()
            server.server_close()
