"""`tt chat MODEL`: talk to a model line by line (logic in tt_host.models.chat).

Each line read from stdin is one user turn; the answer is printed on stdout with control characters removed.
`/reset` starts the conversation again, `/exit` (or end of input, or Ctrl-C: exit 130) ends the chat and
stops the server it started. Notes go to stderr and the `you>` prompt only appears when stdin is a terminal,
so a piped conversation's stdout holds the answers alone, one per line read.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from tt_host.cli.common import err
from tt_host.cli.serve import DeviceOption, NoSpecPromptOption, OfflineOption, SpecPromptOption

COMMANDS = "/reset starts the conversation again, /exit (or Ctrl-D) ends it"


def _serve_args(device: str, offline: bool, no_spec_prompt: bool, spec: Optional[Path],
                temperature: Optional[float]) -> list[str]:
    """The `tt serve` options the chat passes on."""
    args = ["--device", device]
    args += ["--offline"] if offline else []
    args += ["--no-spec-prompt"] if no_spec_prompt else []
    args += ["--spec", str(spec.expanduser().absolute())] if spec is not None else []
    args += ["--temperature", repr(temperature)] if temperature is not None else []
    return args


def _read_line(interactive: bool) -> Optional[str]:
    """The next line (None at end of input)."""
    if interactive:
        try:
            return input("you> ")
        except EOFError:
            return None
    line = sys.stdin.readline()
    return line.rstrip("\r\n") if line else None


def talk(conversation, interactive: bool) -> int:
    """The loop: 0 at /exit or end of input, 1 when the server went away (ServerGone)."""
    from tt_host.models.chat import ChatError, ServerGone
    from tt_host.terminal import clean

    while (line := _read_line(interactive)) is not None:
        text = line.strip()
        if not text:
            continue
        if text in ("/exit", "/quit"):
            break
        if text == "/reset":
            conversation.reset()
            err.print("(conversation cleared)", markup=False)
            continue
        try:
            answer = conversation.ask(line)
        except ServerGone as exc:
            err.print(f"tt chat: {exc}", markup=False)
            return exc.exit_code
        except ChatError as exc:  # an HTTP error: this turn is dropped, the chat goes on
            err.print(f"tt chat: {exc}", markup=False)
            continue
        sys.stdout.write(clean(answer) + "\n")
        sys.stdout.flush()
    return 0


def chat(
    model: Optional[str] = typer.Argument(None, help="Registered model id (or its unique prefix, ID@n too), `active`, "
                                          "`base`, run directory or model folder; with --url, the served model's "
                                          "name (default: the first the server lists)."),
    url: Optional[str] = typer.Option(None, "--url", help="Talk to this running server (http://HOST:PORT) instead "
                                      "of starting one; its key from TT_API_KEY or --api-key-file."),
    api_key_file: Optional[Path] = typer.Option(None, "--api-key-file", help="With --url: the server's API key "
                                                "in this file."),
    no_spec_prompt: bool = NoSpecPromptOption,
    spec: Optional[Path] = SpecPromptOption,
    temperature: Optional[float] = typer.Option(None, "--temperature", min=0, max=2, help="Sampling temperature "
                                                "(default 0: greedy, the decoding tt's evaluation used)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=1, help="Answer budget per turn (default: "
                                             "the server's)."),
    device: str = DeviceOption,
    offline: bool = OfflineOption,
) -> None:
    """Chat with MODEL line by line (the spec's system message applied, as `tt serve` applies it)."""
    import os

    from tt_host.models.chat import ChatError, LocalServer, connect, decoding

    interactive = sys.stdin.isatty()

    def log(message: str, level: str) -> None:
        err.print(f"{'warning: ' if level == 'warning' else 'error: ' if level == 'error' else ''}{message}",
                  markup=False)

    if url is None and model is None:
        raise ChatError("give MODEL (see `tt models list`), or --url of a running server")
    if url is None and api_key_file is not None:
        raise ChatError("--api-key-file goes with --url; the server tt chat starts gets a random key of its own")
    if url is not None and (spec is not None or no_spec_prompt):
        raise ChatError("--spec and --no-spec-prompt choose what tt chat's own server applies; the server at "
                        "--url applies what it was started with")
    if url is not None:  # Ctrl-C: typer's exit 130, after the server tt chat started is stopped
        from tt_host.models.serve import read_api_key_file

        key = read_api_key_file(api_key_file) if api_key_file is not None else os.environ.get("TT_API_KEY")
        endpoint = connect(url, key or None, model)
        err.print(f"tt chat: {endpoint.model} at {endpoint.url}/v1 ({decoding(temperature)}; {COMMANDS})",
                  markup=False)
        code = _chat(endpoint, temperature, max_tokens, interactive)
    else:
        with LocalServer(model, _serve_args(device, offline, no_spec_prompt, spec, temperature), log) as server:
            endpoint = server.start()
            err.print(f"tt chat: {endpoint.model} at {endpoint.url}/v1 ({decoding(temperature)}; {COMMANDS})",
                      markup=False)
            code = _chat(endpoint, temperature, max_tokens, interactive)
    raise typer.Exit(code)


def _chat(endpoint, temperature: Optional[float], max_tokens: Optional[int], interactive: bool) -> int:
    from tt_host.models.chat import EVALUATION_TEMPERATURE, Conversation

    chosen = EVALUATION_TEMPERATURE if temperature is None else temperature
    return talk(Conversation(endpoint, temperature=chosen, max_tokens=max_tokens), interactive)
