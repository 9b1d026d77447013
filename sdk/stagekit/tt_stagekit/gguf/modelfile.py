"""A chat format as Ollama's Modelfile TEMPLATE, and the Modelfile of a GGUF export (stdlib only).

`ChatFormat` is a chat template reduced to text pieces: `head` once before the first message, a prefix and a
suffix around each role's content, and what opens the answer (`generation`). `derive` finds the pieces by
rendering a model's own chat template around marker strings, and accepts them only when they render a
longer conversation exactly as the template does. `go_template` writes them in Ollama's Go template syntax
(`.Messages`, each with `.Role` and `.Content`), so Ollama renders the same text.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

Render = Callable[[Sequence[Mapping[str, str]], bool], str]  # (messages, add_generation_prompt) -> text
MARK = {"system": "\u2063tt-system-marker\u2063", "user": "\u2063tt-user-marker\u2063",
        "assistant": "\u2063tt-assistant-marker\u2063"}
CHECK_CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
                      {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "What is 12345 + 1?"}]


class ChatFormatError(ValueError):
    """The chat template cannot be written as a Modelfile TEMPLATE."""


@dataclass(frozen=True)
class ChatFormat:
    head: str
    roles: Mapping[str, tuple[str, str]]
    generation: str

    def render(self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool) -> str:
        """The text the Go template renders for these messages (Ollama's view)."""
        parts = [self.head] if messages else []
        for index, message in enumerate(messages):
            prefix, suffix = self.roles[message["role"]]
            last = index == len(messages) - 1
            parts.append(prefix + message["content"])
            if message["role"] != "assistant" or not last:
                parts.append(suffix)
        if add_generation_prompt and messages and messages[-1]["role"] != "assistant":
            parts.append(self.generation)
        return "".join(parts)


def _around(text: str, marker: str) -> tuple[str, str]:
    if text.count(marker) != 1:
        raise ChatFormatError("the chat template does not render each message's content once, as it is")
    before, after = text.split(marker)
    return before, after


def _strip(text: str, prefix: str = "", suffix: str = "") -> str:
    if not text.startswith(prefix) or not text.endswith(suffix) or len(text) < len(prefix) + len(suffix):
        raise ChatFormatError("the chat template does not render a conversation as one piece per message")
    return text[len(prefix):len(text) - len(suffix)]


def derive(render: Render) -> ChatFormat:
    """The pieces of a chat template (ChatFormatError when it is not built of them)."""
    user = {"role": "user", "content": MARK["user"]}
    assistant = {"role": "assistant", "content": MARK["assistant"]}
    second = {"role": "user", "content": MARK["user"] + "2"}
    try:
        u_before, u_suffix = _around(render([user], False), MARK["user"])
        generation = _strip(render([user], True), u_before + MARK["user"] + u_suffix)
        ua = render([user, assistant], False)
        between_ua, a_suffix = _around(ua.split(MARK["user"], 1)[1], MARK["assistant"])
        a_prefix = _strip(between_ua, u_suffix)
        uau = render([user, assistant, second], False)
        between_au = _around(uau, MARK["assistant"])[1].split(MARK["user"] + "2")[0]
        u_prefix = _strip(between_au, a_suffix)
        head = _strip(u_before, "", u_prefix)
        su = render([{"role": "system", "content": MARK["system"]}, user], False)
        s_before, s_after = _around(su, MARK["system"])
        s_prefix = _strip(s_before, head)
        s_suffix = _strip(s_after.split(MARK["user"])[0], "", u_prefix)
    except ChatFormatError:
        raise
    except Exception as exc:  # the template itself refused one of the conversations
        raise ChatFormatError(f"the chat template cannot render a plain system/user/assistant conversation: {exc}")
    found = ChatFormat(head, {"system": (s_prefix, s_suffix), "user": (u_prefix, u_suffix),
                              "assistant": (a_prefix, a_suffix)}, generation)
    for add in (False, True):
        if found.render(CHECK_CONVERSATION, add) != render(CHECK_CONVERSATION, add):
            raise ChatFormatError("the chat template renders a longer conversation differently than per-message "
                                  "pieces would (it depends on more than each message's role)")
    return found


def _invisible(text: str, what: str) -> None:
    """Refuse a format character (category Cf: zero-width space, bidi controls, ...): Ollama's parser drops
    them, so Ollama would serve another text than the one exported."""
    for index, char in enumerate(text):
        if unicodedata.category(char) == "Cf":
            raise ChatFormatError(f"the {what} holds the invisible format character U+{ord(char):04X} at position "
                                  f"{index}, which Ollama's Modelfile parser drops; remove it")


def _literal(text: str, what: str) -> str:
    """`text` as it stands in the Modelfile: no `{{` or `\"\"\"`, no invisible format character, and no final `{`
    (before the template's next `{{` it would make `{{{`, which Go's template parser refuses)."""
    if "{{" in text or '"""' in text:
        raise ChatFormatError(f"the chat template's {what} text {text!r} holds '{{{{' or '\"\"\"'")
    if text.endswith("{"):
        raise ChatFormatError(f"the chat template's {what} text {text!r} ends in '{{', which joins the next "
                              "'{{' of the Go template into '{{{'")
    _invisible(text, f"{what} text" if what == "system message" else f"chat template's {what} text")
    return text


def go_template(chat: ChatFormat) -> str:
    """Ollama's TEMPLATE for the format: on one line, so Go's whitespace trimming never touches the text."""
    (sp, ss), (up, us), (ap, as_) = (tuple(_literal(t, role) for t in chat.roles[role])
                                      for role in ("system", "user", "assistant"))
    return ("{{ range $i, $_ := .Messages }}{{ $last := eq (len (slice $.Messages $i)) 1 }}"
            f"{{{{ if eq $i 0 }}}}{_literal(chat.head, 'head')}{{{{ end }}}}"
            f'{{{{ if eq .Role "system" }}}}{sp}{{{{ .Content }}}}{ss}'
            f'{{{{ else if eq .Role "user" }}}}{up}{{{{ .Content }}}}{us}'
            f"{{{{ if $last }}}}{_literal(chat.generation, 'generation')}{{{{ end }}}}"
            f'{{{{ else if eq .Role "assistant" }}}}{ap}{{{{ .Content }}}}{{{{ if not $last }}}}{as_}{{{{ end }}}}'
            "{{ end }}{{ end }}")


def _quoted(value: str, what: str) -> str:
    if '"' in value or "\n" in value:
        raise ChatFormatError(f"{what} {value!r} cannot be written as a quoted Modelfile value")
    _invisible(value, what)
    return f'"{value}"'


def modelfile(gguf_name: str, chat: ChatFormat, system_message: Optional[str], stop_tokens: Sequence[str],
              context: int) -> str:
    """The Modelfile text: FROM the GGUF beside it, TEMPLATE, SYSTEM, a stop per end-of-turn token, num_ctx."""
    lines = [f"FROM ./{gguf_name}", f'TEMPLATE """{go_template(chat)}"""']
    if system_message:
        lines.append(f'SYSTEM """{_literal(system_message, "system message")}"""')
    lines += [f"PARAMETER stop {_quoted(token, 'stop token')}" for token in stop_tokens]
    lines.append(f"PARAMETER num_ctx {int(context)}")
    return "\n".join(lines) + "\n"


def ollama_name(model_id: str) -> str:
    """A model name `ollama create` accepts, made from tt's model id."""
    name = re.sub(r"[^a-z0-9._-]+", "-", model_id.lower()).strip("-._")
    return name or "tt-model"
