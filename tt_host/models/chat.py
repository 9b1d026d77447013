"""`tt chat`: a conversation with a model over the OpenAI-compatible API `tt serve` gives it (host side).

`LocalServer` starts `tt serve MODEL` itself, as a child process (`python -P`: a module in the current folder
is never imported; the same command, so the same model resolution, engine environment, system message and
limits): bound to 127.0.0.1 on a free port, with a random
API key passed through the environment (never on a command line), in its own session so that a Ctrl-C at the
chat prompt reaches only the chat, which then stops the server (SIGINT, its graceful stop; SIGKILL after
the grace). Its `--json` events are read until `ready`; what it logs before that (an environment being
built) is shown, afterwards only its warnings and errors; its stderr (the access log) goes to a temporary
file whose last lines are shown when it fails. `--url` talks to a server already running instead.

`Conversation` keeps the turns: each line is sent with every earlier user and assistant turn to
`/v1/chat/completions` (the server puts the spec's system message first, as it does for every request);
an HTTP error leaves the conversation as it was. Requests go straight to the server (proxy variables not used),
and a redirect is never followed (exit 2 naming where it pointed): the API key goes to the address given only.
Every request carries a temperature: the chat's `--temperature`, else EVALUATION_TEMPERATURE, the greedy decoding
tt's evaluation answers the held-out prompts with (no spec setting changes it), so that chatting shows the model
the report judged; `decoding` words it for the banner.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from tt_host.errors import TTError
from tt_host.terminal import clean

STOP_SECONDS = 40.0  # tt serve's own grace (30 s) and a margin, then the chat kills it
REQUEST_SECONDS = 600.0  # one answer on a slow CPU
EVALUATION_TEMPERATURE = 0.0  # tt's evaluation stages decode greedily; the report's answers are those
ENTRY = "import sys; from tt_host.cli.entry import main; sys.argv[0] = 'tt'; sys.exit(main())"


class ChatError(TTError):
    """The chat cannot start (exit 2: a bad argument, or the server's own exit code) or its server went away."""

    exit_code = 2


@dataclass
class Endpoint:
    """A server to talk to: its base URL (no `/v1`), the model to name in requests, the API key (or None)."""

    url: str
    model: str
    api_key: Optional[str] = None


def base_url(url: str) -> str:
    """`--url` as a base URL: http(s), a host, no query; a trailing `/` or `/v1` dropped (exit 2 otherwise)."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ChatError(f"--url {clean(url)!r}: give the server's address, e.g. http://127.0.0.1:8000 (or .../v1)")
    path = parts.path.rstrip("/")
    path = path[:-3] if path.endswith("/v1") else path
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is refused, never followed: the API key goes to the address given and nowhere else."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 (urllib's signature)
        raise ChatError(f"{clean(req.full_url)} answered {code} redirecting to {clean(str(newurl))[:300]}; tt chat "
                        "follows no redirect (the API key is sent to the address given only): give --url the "
                        "server's own address")


def _open(request: urllib.request.Request, timeout: float) -> Any:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
    with opener.open(request, timeout=timeout) as response:
        return json.loads(response.read())


def _call(endpoint: Endpoint, path: str, body: Optional[dict[str, Any]] = None,
          timeout: float = REQUEST_SECONDS) -> Any:
    headers = {"Content-Type": "application/json"}
    if endpoint.api_key:
        headers["Authorization"] = f"Bearer {endpoint.api_key}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(endpoint.url + path, data=data, headers=headers,
                                     method="POST" if body is not None else "GET")
    try:
        return _open(request, timeout)
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("error", {}).get("message") or exc.reason
        except (ValueError, AttributeError, OSError):
            detail = exc.reason
        raise ChatError(f"the server answered {exc.code}: {clean(str(detail))[:500]}", exit_code=1) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ServerGone(f"{endpoint.url} cannot be reached ({clean(str(reason))}); is the server running?")


class ServerGone(ChatError):
    """The server no longer answers (exit 1): the chat ends."""

    exit_code = 1


def connect(url: str, api_key: Optional[str], model: Optional[str]) -> Endpoint:
    """An already-running server (`--url`): its `/v1/models` answers, naming `model` (default: the first)."""
    endpoint = Endpoint(base_url(url), model or "", api_key)
    listed = _call(endpoint, "/v1/models", timeout=30)
    names = [str(m.get("id")) for m in (listed or {}).get("data") or [] if isinstance(m, dict)]
    if not names:
        raise ChatError(f"{endpoint.url}/v1/models lists no model", exit_code=1)
    if model and model not in names:
        raise ChatError(f"{endpoint.url} serves {', '.join(map(clean, names))}, not {clean(model)!r}")
    endpoint.model = model or names[0]
    return endpoint


@dataclass
class Conversation:
    """The turns so far, and the sampling settings every request carries (max_tokens None: the server's)."""

    endpoint: Endpoint
    temperature: float = EVALUATION_TEMPERATURE
    max_tokens: Optional[int] = None
    messages: list[dict[str, str]] = field(default_factory=list)

    def ask(self, text: str) -> str:
        """The model's answer to `text` after the turns so far (both kept); ChatError leaves them unchanged."""
        turn = {"role": "user", "content": text}
        body: dict[str, Any] = {"model": self.endpoint.model, "messages": [*self.messages, turn]}
        body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        reply = _call(self.endpoint, "/v1/chat/completions", body)
        try:
            answer = reply["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise ChatError("the server's answer holds no choices[0].message.content", exit_code=1) from None
        self.messages += [turn, {"role": "assistant", "content": str(answer)}]
        return str(answer)

    def reset(self) -> None:
        self.messages.clear()


def decoding(temperature: Optional[float]) -> str:
    """The banner's words for the chat's decoding (`--temperature`, None when not given)."""
    if temperature is None:
        return "greedy, as the evaluation decoded (--temperature T samples)"
    if temperature <= 0:
        return "greedy (--temperature 0)"
    return f"sampling at temperature {temperature:g} (the evaluation decoded greedily: --temperature 0)"


class LocalServer:
    """`tt serve REFERENCE` for this chat (see the module docstring); a context manager that stops it."""

    def __init__(self, reference: str, serve_args: list[str], log: Callable[[str, str], None]) -> None:
        self.reference, self.serve_args, self.log = reference, serve_args, log
        self.process: Optional[subprocess.Popen] = None
        self.stderr = tempfile.TemporaryFile()

    def __enter__(self) -> "LocalServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.stderr.close()

    def start(self) -> Endpoint:
        key = secrets.token_urlsafe(32)
        env = {**os.environ, "TT_API_KEY": key}
        command = [sys.executable, "-P", "-c", ENTRY, "serve", self.reference, "--host", "127.0.0.1", "--port", "0",
                   "--json", *self.serve_args]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.stderr, stdin=subprocess.DEVNULL,
                                        env=env, start_new_session=True, text=True, errors="replace")
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = self._event(line)
            if event.get("type") == "ready":
                threading.Thread(target=self._drain, daemon=True).start()
                return Endpoint(str(event["url"]).rstrip("/"), str(event.get("model") or self.reference), key)
            if event.get("type") == "log":
                self.log(str(event.get("message", "")), str(event.get("level", "info")))
            elif isinstance(event.get("error"), dict):
                code = self.process.wait()
                raise ChatError(str(event["error"].get("message", "tt serve failed")), exit_code=code or 1)
        code = self.process.wait()
        raise ChatError(f"tt serve {clean(self.reference)} stopped before it was ready (exit {code})"
                        f"{self._stderr_tail()}", exit_code=code or 1)

    def _event(self, line: str) -> dict[str, Any]:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:  # a refusal: one indented JSON object to the end of the output
            assert self.process is not None and self.process.stdout is not None
            try:
                event = json.loads(line + self.process.stdout.read())
            except json.JSONDecodeError:
                return {}
        return event if isinstance(event, dict) else {}

    def _drain(self) -> None:
        """The server's events while chatting: warnings and errors shown, the rest read and dropped."""
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            event = self._event(line)
            if event.get("type") == "log" and event.get("level") in ("warning", "error"):
                self.log(str(event.get("message", "")), str(event["level"]))

    def _stderr_tail(self, lines: int = 15) -> str:
        self.stderr.seek(0)
        text = self.stderr.read().decode("utf-8", "replace").strip().splitlines()[-lines:]
        return (":\n" + "\n".join(text)) if text else ""

    def stop(self) -> Optional[int]:
        """Stop the server (SIGINT, then SIGKILL of its group after STOP_SECONDS); its exit code."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            try:
                os.kill(process.pid, signal.SIGINT)
                return process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return process.wait()
