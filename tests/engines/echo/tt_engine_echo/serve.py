"""A minimal OpenAI-compatible server for echo models: `python -m tt_engine_echo.serve REQUEST.json`.

Declared as the engine's `Serve`: `tt serve` starts it with the request of docs/serving.md (`model_path`,
`model_name`, `system_message`, `host`, `port`, `ready_file`, ...; the API key in TT_SERVE_API_KEY).
`GET /v1/models` lists the model; `POST /v1/chat/completions` answers the last user message with the
memorized answer (or echoes it). Prints a `ready` event once listening and stops on SIGTERM/SIGINT.
"""

import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tt_engine_echo.protocol import emit, read_request, write_json

request = read_request()
with open(os.path.join(request["model_path"], "table.json"), encoding="utf-8") as handle:
    table = json.load(handle)
api_key = os.environ.get("TT_SERVE_API_KEY")


class Handler(BaseHTTPRequestHandler):
    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        if api_key and self.headers.get("Authorization") != f"Bearer {api_key}":
            self._send(401, {"error": {"message": "invalid API key", "type": "invalid_request_error"}})
            return False
        return True

    def do_GET(self) -> None:
        if not self._authorized():
            return
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": request["model_name"], "object": "model",
                                                         "owned_by": "tt"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})

    def do_POST(self) -> None:
        if not self._authorized():
            return
        if self.path != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            prompt = [m for m in body["messages"] if m.get("role") == "user"][-1]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            self._send(400, {"error": {"message": "messages must hold a user message", "type": "invalid_request_error"}})
            return
        answer = table.get(prompt, prompt)
        if prompt == "/echo-request":  # tests of `tt chat`: what the server was asked, with its system message
            answer = json.dumps({"system_message": request.get("system_message"), "messages": body["messages"],
                                 "temperature": body.get("temperature"), "max_tokens": body.get("max_tokens")})
        self._send(200, {
            "id": "chatcmpl-echo", "object": "chat.completion", "model": request["model_name"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": answer}}],
            "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(answer.split()),
                      "total_tokens": len(prompt.split()) + len(answer.split())},
        })

    def log_message(self, format: str, *args) -> None:  # the access log goes to stderr, like uvicorn's
        sys.stderr.write(format % args + "\n")


server = ThreadingHTTPServer((request["host"], request["port"]), Handler)


stops = []
# TT_ECHO_SERVE_STOP (tests of `tt serve`'s shutdown): "ignore" never stops on a signal (only a kill ends it);
# "second" stays up on the first signal, as a server finishing a request in flight, and stops on the second.
stop_mode = os.environ.get("TT_ECHO_SERVE_STOP", "")


def _stop(signum, frame) -> None:
    stops.append(signum)
    if stop_mode == "ignore" or (stop_mode == "second" and len(stops) < 2):
        emit("log", level="info", message=f"stop request {len(stops)} received; still serving")
        return
    threading.Thread(target=server.shutdown, daemon=True).start()


signal.signal(signal.SIGTERM, _stop)
signal.signal(signal.SIGINT, _stop)
host, port = server.server_address[:2]
ready = {"type": "ready", "url": f"http://{host}:{port}", "model": request["model_name"], "pid": os.getpid()}
if request.get("ready_file"):
    write_json(request["ready_file"], ready)
print(json.dumps(ready), flush=True)
server.serve_forever()
server.server_close()
emit("log", level="info", message="stopped")
