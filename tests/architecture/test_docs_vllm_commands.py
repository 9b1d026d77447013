"""Every `vllm serve` command the docs give binds loopback (`--host 127.0.0.1`) or sets a key (`--api-key`,
`VLLM_API_KEY`): vLLM binds every interface without a key by default, and a copied recipe must not serve a
model to the network unauthenticated (docs/serving.md "Beyond one machine: vLLM")."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def vllm_commands() -> list[tuple[str, str]]:
    found = []
    for doc in sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]:
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"(^|\s|=\S*\s)vllm serve \S", line) and not line.lstrip().startswith(("#", "-", "|")) \
                    and "`vllm serve" not in line:
                found.append((f"{doc.relative_to(REPO)}:{number}", line))
    return found


def test_every_vllm_command_in_the_docs_binds_loopback_or_sets_a_key():
    commands = vllm_commands()
    assert len(commands) >= 2, commands  # the recipe's commands are found
    unsafe = [f"{where}: {line}" for where, line in commands
              if "--host 127.0.0.1" not in line and "--api-key" not in line and "VLLM_API_KEY=" not in line]
    assert not unsafe, "vllm serve without loopback or a key:\n" + "\n".join(unsafe)
