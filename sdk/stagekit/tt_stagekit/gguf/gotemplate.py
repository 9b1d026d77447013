"""Render the Go template of an Ollama Modelfile's TEMPLATE over `.Messages` (stdlib only), as Go's text/template does.

Only the part of the language `modelfile.go_template` writes: text, `{{ range $i, $_ := .Messages }}`, `{{ $v := X }}`,
`{{ if X }}` / `{{ else if X }}` / `{{ else }}` / `{{ end }}`, and the expressions `.Field`, `$.Messages`, `$v`,
integers, "strings", `(X).Field` and the functions eq, ne, and, not, len, slice, index. Anything else raises
ValueError, so a test never passes on a construct it did not understand. Tests use it to check the Modelfile's own
text against the model's chat template (Ollama itself is not installed here).
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

_ACTION = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}", re.S)
_TOKEN = re.compile(r'\(|\)|"[^"]*"|[^\s()]+')
_FUNCS = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "and": lambda *a: all(a), "not": lambda a: not a,
          "len": len, "slice": lambda seq, start: seq[start:], "index": lambda seq, i: seq[i]}


def _parse_nodes(items: list, pos: int, stops: tuple[str, ...]) -> tuple[list, int, str]:
    nodes: list = []
    while pos < len(items):
        kind, value = items[pos]
        pos += 1
        if kind == "text":
            nodes.append(("text", value))
        elif value == "end" or value == "else" or value.startswith("else if "):
            if value.split(" ")[0] not in stops:
                raise ValueError(f"unexpected {{{{ {value} }}}}")
            return nodes, pos, value
        elif value.startswith("if "):
            branches, cond = [], value[3:]
            while True:
                body, pos, stop = _parse_nodes(items, pos, ("end", "else"))
                branches.append((cond, body))
                if stop == "end":
                    break
                cond = stop[8:] if stop.startswith("else if ") else "true"
            nodes.append(("if", branches))
        elif m := re.fullmatch(r"range \$(\w+), \$(\w+) := \.Messages", value):
            body, pos, _ = _parse_nodes(items, pos, ("end",))
            nodes.append(("range", m.group(1), body))
        elif m := re.fullmatch(r"\$(\w+) := (.+)", value):
            nodes.append(("set", m.group(1), m.group(2)))
        else:
            nodes.append(("print", value))
    if stops:
        raise ValueError("a block without {{ end }}")
    return nodes, pos, ""


def _expr(tokens: list[str], pos: int, scope: dict) -> tuple[Any, int]:
    """One term (and the field access after a parenthesised group)."""
    token = tokens[pos]
    if token == "(":
        value, pos = _call(tokens, pos + 1, scope, closing=True)
    elif token == "true":
        value, pos = True, pos + 1
    elif token.startswith('"'):
        value, pos = token[1:-1], pos + 1
    elif re.fullmatch(r"-?\d+", token):
        value, pos = int(token), pos + 1
    elif token == "$.Messages":
        value, pos = scope["$root"], pos + 1
    elif token.startswith("$"):
        value, pos = scope[token[1:]], pos + 1
    elif token.startswith("."):
        value, pos = scope["."], pos
    else:
        raise ValueError(f"unknown term {token!r}")
    while pos < len(tokens) and tokens[pos].startswith("."):
        value, pos = value[tokens[pos][1:]], pos + 1
    return value, pos


def _call(tokens: list[str], pos: int, scope: dict, closing: bool = False) -> tuple[Any, int]:
    if tokens[pos] in _FUNCS:
        func, args, pos = _FUNCS[tokens[pos]], [], pos + 1
        while pos < len(tokens) and tokens[pos] != ")":
            arg, pos = _expr(tokens, pos, scope)
            args.append(arg)
        value = func(*args)
    else:
        value, pos = _expr(tokens, pos, scope)
    if closing:
        if tokens[pos] != ")":
            raise ValueError("unbalanced parentheses")
        pos += 1
    return value, pos


def _eval(text: str, scope: dict) -> Any:
    tokens = _TOKEN.findall(text)
    value, pos = _call(tokens, 0, scope)
    if pos != len(tokens):
        raise ValueError(f"cannot read {text!r}")
    return value


def _run(nodes: list, scope: dict, out: list[str]) -> None:
    for node in nodes:
        if node[0] == "text":
            out.append(node[1])
        elif node[0] == "print":
            out.append(str(_eval(node[1], scope)))
        elif node[0] == "set":
            scope[node[1]] = _eval(node[2], scope)
        elif node[0] == "if":
            for cond, body in node[1]:
                if _eval(cond, scope):
                    _run(body, dict(scope), out)
                    break
        elif node[0] == "range":
            for index, message in enumerate(scope["$root"]):
                _run(node[2], {**scope, node[1]: index, ".": message}, out)


def render(template: str, messages: Sequence[Mapping[str, str]]) -> str:
    """The prompt Ollama's template renders for these messages (each with Role and Content)."""
    items, pos = [], 0
    for match in _ACTION.finditer(template):
        items.append(("text", template[pos:match.start()]))
        items.append(("action", match.group(1)))
        pos = match.end()
    items.append(("text", template[pos:]))
    if any(kind == "action" and ("{{" in value) for kind, value in items):
        raise ValueError("'{{{' in the template")
    nodes, _, _ = _parse_nodes(items, 0, ())
    out: list[str] = []
    _run(nodes, {"$root": [{"Role": m["role"], "Content": m["content"]} for m in messages], ".": None}, out)
    return "".join(out)
