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
        "assistant": "\u2063tt-assistant-marker\u2063", "second": "\u2063tt-second-marker\u2063"}
CHECK_CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
                      {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "What is 12345 + 1?"}]
CHECK_CONVERSATIONS = [CHECK_CONVERSATION, CHECK_CONVERSATION[1:], CHECK_CONVERSATION[:2], CHECK_CONVERSATION[1:2],
                       CHECK_CONVERSATION + [{"role": "assistant", "content": "12346"},
                                             {"role": "user", "content": "And 2 + 2?"}]]
# Constructs a Go template over .Messages cannot follow (each message's pieces depend on its role only, plus the
# first message and the last); named with their line when a template renders a conversation differently.
CONSTRUCTS = [(r"loop\.last|\[-1\]|loop\.revindex", "a test of the last message"),
              (r"namespace\(", "state carried from message to message (namespace)"),
              (r"loop\.index|loop\.first|loop\.length|messages\|length", "a test of the message's position"),
              (r"\|\s*trim|\.strip\(\)", "content trimmed of whitespace"),
              (r"strftime_now|date_string", "today's date"),
              (r"raise_exception", "a conversation the template refuses")]
INSTEAD = ("export with `--format gguf` instead: the GGUF carries the template itself (tokenizer.chat_template), and "
           "llama.cpp applies it with its own template handling (llama-server --jinja)")


class ChatFormatError(ValueError):
    """The chat template cannot be written as a Modelfile TEMPLATE."""


@dataclass(frozen=True)
class ChatFormat:
    """`no_system`: what the template writes where a system turn would be when the chat has none (its default system
    message, or ""). `fold`: for a template without a system role, (before, between): a leading system message is
    written inside the first user turn as before + system + between + user text. `tail`: what it writes after the
    last user message when no answer is asked for (never part of Ollama's prompt)."""

    head: str
    roles: Mapping[str, tuple[str, str]]
    generation: str
    no_system: str = ""
    fold: Optional[tuple[str, str]] = None
    tail: str = ""

    def default_system_message(self) -> Optional[str]:
        """The model's own default system message (the template's `no_system` read as a system turn), else None."""
        prefix, suffix = self.roles["system"]
        inner = self.no_system
        if self.fold or not inner or not inner.startswith(prefix) or not inner.endswith(suffix):
            return None
        return inner[len(prefix):len(inner) - len(suffix)] or None

    def render(self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool) -> str:
        """The text the Go template renders for these messages (Ollama's view; `tail` when no answer is asked)."""
        parts = [self.head] if messages else []
        if messages and messages[0]["role"] != "system":
            parts.append(self.no_system)
        folded = (self.fold is not None and len(messages) > 1 and messages[0]["role"] == "system"
                  and messages[1]["role"] == "user")
        for index, message in enumerate(messages):
            if self.fold is not None and message["role"] == "system":
                continue
            prefix, suffix = self.roles[message["role"]]
            content = message["content"]
            if folded and index == 1:
                content = self.fold[0] + messages[0]["content"] + self.fold[1] + content
            last = index == len(messages) - 1
            parts.append(prefix + content)
            if message["role"] != "assistant" or not last:
                parts.append(suffix)
        if messages and messages[-1]["role"] != "assistant":
            parts.append(self.generation if add_generation_prompt else self.tail)
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


def _common(*texts: str) -> str:
    """The longest common prefix; when it ends inside every text, cut back to the last newline, '>' or ']' in it
    (so `<|end|>\n<|user|>` and `<|end|>\n<|assistant|>` share `<|end|>\n`, not `<|end|>\n<|`)."""
    size = 0
    while all(len(t) > size for t in texts) and len({t[size] for t in texts}) == 1:
        size += 1
    common = texts[0][:size]
    if all(len(t) > size for t in texts):
        cut = max(common.rfind(c) for c in "\n>]")
        common = common[:cut + 1]
    return common


def construct_line(source: Optional[str]) -> str:
    """The first construct of CONSTRUCTS in the template source, with its line number ("" when none is found).
    Lines about tools are passed over (a plain chat never renders them), and a line that also names a message, the
    system message or the content is preferred to one that does not."""
    if not source:
        return ""
    lines = [(n, line) for n, line in enumerate(source.splitlines(), 1) if "tool" not in line]
    for pattern, what in CONSTRUCTS:
        hits = [(n, line) for n, line in lines if re.search(pattern, line)]
        if hits:
            n, line = next((h for h in hits if re.search(r"message|system|content", h[1])), hits[0])
            return f"; the likely cause: {what}, line {n}: {line.strip()[:120]!r}"
    return ""


def _pieces(render: Render) -> ChatFormat:
    s, u, a, u2 = ({"role": role, "content": MARK[name]} for role, name in
                   (("system", "system"), ("user", "user"), ("assistant", "assistant"), ("user", "second")))
    su, su_gen = render([s, u], False), render([s, u], True)
    sua, suau, alone = render([s, u, a], False), render([s, u, a, u2], False), render([u], False)
    before_s, rest = _around(su, MARK["system"])
    between_su, after_u = _around(rest, MARK["user"])
    before_u, after_u_gen = _around(su_gen, MARK["user"])
    if before_u != before_s + MARK["system"] + between_su:
        raise ChatFormatError("the chat template renders the conversation before the answer differently when "
                              "an answer is asked for")
    between_ua, after_a = _around(_around(sua, MARK["user"])[1], MARK["assistant"])
    between_au, after_u2 = _around(_around(suau, MARK["assistant"])[1], MARK["second"])
    user_suffix = _common(after_u, after_u_gen, between_ua)
    tail, generation = after_u[len(user_suffix):], after_u_gen[len(user_suffix):]
    assistant_prefix = between_ua[len(user_suffix):]
    assistant_suffix = _strip(after_a, "", tail)
    user_prefix = _strip(between_au, assistant_suffix)
    if after_u2 != after_u:
        raise ChatFormatError("the chat template ends a later user message differently than the first")
    pre = _strip(_around(alone, MARK["user"])[0], "", user_prefix)  # head + what stands for the missing system
    if between_su.endswith(user_prefix):  # a system role of its own
        head = _common(before_s, pre)
        system = (before_s[len(head):], between_su[:len(between_su) - len(user_prefix)])
        fold = None
    else:  # no system role: the system message is written inside the first user turn
        head, fold, system = pre, (_strip(before_s, pre + user_prefix), between_su), ("", "")
    return ChatFormat(head, {"system": system, "user": (user_prefix, user_suffix),
                             "assistant": (assistant_prefix, assistant_suffix)},
                      generation, no_system=pre[len(head):], fold=fold, tail=tail)


def derive(render: Render, source: Optional[str] = None) -> ChatFormat:
    """The pieces of a chat template (ChatFormatError when it is not built of them). `source`: the template's text,
    to name the construct and line that cannot be followed, and the export to use instead."""
    try:
        found = _pieces(render)
    except ChatFormatError as exc:
        raise ChatFormatError(f"{exc}{construct_line(source)}; {INSTEAD}") from None
    except Exception as exc:  # the template itself refused one of the conversations
        raise ChatFormatError(f"the chat template cannot render a plain system/user/assistant conversation: {exc}"
                              f"{construct_line(source)}; {INSTEAD}") from None
    for conversation in CHECK_CONVERSATIONS:
        for add in (False, True):
            try:
                want = render(conversation, add)
            except Exception as exc:
                raise ChatFormatError(f"the chat template cannot render the {len(conversation)}-message check "
                                      f"conversation: {exc}{construct_line(source)}; {INSTEAD}") from None
            if found.render(conversation, add) != want:
                roles = "/".join(m["role"] for m in conversation)
                raise ChatFormatError(f"the chat template renders a {roles} conversation differently than "
                                      f"per-message pieces would (it depends on more than each message's role)"
                                      f"{construct_line(source)}; {INSTEAD}")
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
    first = _literal(chat.head, "head")
    if chat.no_system:
        first += f'{{{{ if ne .Role "system" }}}}{_literal(chat.no_system, "default system")}{{{{ end }}}}'
    system, folded = f"{sp}{{{{ .Content }}}}{ss}", ""
    if chat.fold is not None:
        before, between = (_literal(t, "folded system") for t in chat.fold)
        system = ""
        folded = ('{{ if and (eq $i 1) (eq (index $.Messages 0).Role "system") }}'
                  f"{before}{{{{ (index $.Messages 0).Content }}}}{between}{{{{ end }}}}")
    return ("{{ range $i, $_ := .Messages }}{{ $last := eq (len (slice $.Messages $i)) 1 }}"
            f"{{{{ if eq $i 0 }}}}{first}{{{{ end }}}}"
            f'{{{{ if eq .Role "system" }}}}{system}'
            f'{{{{ else if eq .Role "user" }}}}{up}{folded}{{{{ .Content }}}}{us}'
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
    """The Modelfile text: FROM the GGUF beside it, TEMPLATE, SYSTEM, a stop per end-of-turn token, num_ctx, and
    temperature 0: the greedy decoding tt's evaluation answered with (Ollama's own default samples at 0.8)."""
    lines = [f"FROM ./{gguf_name}", f'TEMPLATE """{go_template(chat)}"""']
    if system_message:
        lines.append(f'SYSTEM """{_literal(system_message, "system message")}"""')
    lines += [f"PARAMETER stop {_quoted(token, 'stop token')}" for token in stop_tokens]
    lines.append(f"PARAMETER num_ctx {int(context)}")
    lines.append("PARAMETER temperature 0")
    return "\n".join(lines) + "\n"


def ollama_name(model_id: str) -> str:
    """A model name `ollama create` accepts, made from tt's model id."""
    name = re.sub(r"[^a-z0-9._-]+", "-", model_id.lower()).strip("-._")
    return name or "tt-model"
