"""Preference pairs: derived by sampling the SFT adapter on the training prompts and grading the samples, or
read from the spec's pairs file; rendered by the SFT rows' own code; their reference log-probs. Runs in the engine
environment.

Derived pairs use only the prepare stage's training rows (the host's train split, prebuilt train rows and
synthetic rows): the held-out prompts never reach this module (the stages that build pairs get no
`eval_prompts`). Each prompt is sampled `samples_per_prompt` times (seeded) and every sample graded against
the row's own answer (tt_stagekit.graders, the spec's graders): a passing sample is chosen, a failing one
rejected, as many pairs as the smaller side has distinct answers; a prompt whose samples all pass or all
fail teaches nothing and is dropped (counted).

A pair is rendered as two chat rows, `prompt + [assistant chosen]` and `prompt + [assistant rejected]`, by
runtime.chat.encode_row (`turns="last"`), the function that renders SFT rows, so prompt tokens, BOS and the
end-of-turn token are the SFT rows' to the token: the completion's log-prob is over the answer and its
end-of-turn token. KTO's KL sequences pair each prompt with the previous pair's chosen answer (the last
pair's for the first), as KTOTrainer cycles completions.

The reference model is `preference.reference`: "sft" (default), the SFT adapter as trained, frozen, which is
what TRL's DPOTrainer uses when the policy is a PEFT model with a pretrained adapter (it copies it into a
frozen "ref" adapter), or "base", the base model with the adapter disabled (TRL's reference for a new
adapter). Either way one model is in memory and the log-probs are computed once, by the reference stage.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Optional, Sequence

from tt_engine_adapter.runtime import chat
from tt_engine_adapter.runtime.chat import Encoded
from tt_stagekit.sameness import normalize_prompt


def encode_pair(tokenizer: Any, pair: dict, system: str, max_seq_length: int, eot: int) -> tuple[Encoded, Encoded]:
    """(chosen row, rejected row), each `system + prompt + answer` rendered and supervised as an SFT row."""
    from tt_engine_adapter.runtime.data import with_system

    prompt = with_system(system, pair["messages"])
    return tuple(chat.encode_row(tokenizer, f"{pair['id']}:{side}", prompt + [{"role": "assistant", "content": pair[side]}],
                                 max_seq_length, eot, "last") for side in ("chosen", "rejected"))  # type: ignore[return-value]


def encode_kl(tokenizer: Any, pairs: Sequence[dict], system: str, max_seq_length: int, eot: int) -> list[Encoded]:
    """KTO's mismatched sequences: pair i's prompt with pair i-1's chosen answer."""
    from tt_engine_adapter.runtime.data import with_system

    out = []
    for i, pair in enumerate(pairs):
        other = pairs[i - 1]["chosen"]
        messages = with_system(system, pair["messages"]) + [{"role": "assistant", "content": other}]
        out.append(chat.encode_row(tokenizer, f"{pair['id']}:kl", messages, max_seq_length, eot, "last"))
    return out


def sample(model: Any, tokenizer: Any, prompts: Sequence[dict], *, n: int, temperature: float, max_new_tokens: int,
           max_seq_length: int, device: str, seed: int, batch_size: int,
           on_batch: Optional[Callable[[int, int, float], None]] = None) -> list[list[str]]:
    """`n` sampled answers per `{"id", "messages"}` prompt (seeded; left padding, the KV cache); `on_batch(prompts
    done, prompts, seconds)` after each batch of `batch_size` prompts, as runtime.generate's."""
    import time

    import torch
    from transformers import GenerationConfig

    from tt_engine_adapter.runtime.generate import stop_ids

    pad = chat.pad_token_id(tokenizer)
    stops = stop_ids(tokenizer)
    config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=True, temperature=temperature, top_p=1.0,
                              top_k=0, num_return_sequences=n, pad_token_id=pad, eos_token_id=stops, use_cache=True)
    encoded = [chat.encode_prompt(tokenizer, p["messages"], max_seq_length - max_new_tokens)[0] for p in prompts]
    out: list[list[str]] = []
    model.eval()
    torch.manual_seed(seed)
    started = time.perf_counter()
    for start in range(0, len(prompts), batch_size):
        batch = encoded[start:start + batch_size]
        width = max(len(s) for s in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, seq in enumerate(batch):
            ids[row, width - len(seq):] = torch.tensor(seq)
            mask[row, width - len(seq):] = 1
        with torch.inference_mode():
            generated = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=config)
        for row in range(len(batch)):
            answers = []
            for k in range(n):
                new = generated[row * n + k, width:].tolist()
                cut = next((j for j, tok in enumerate(new) if tok in stops), len(new))
                answers.append(tokenizer.decode(new[:cut], skip_special_tokens=True).strip())
            out.append(answers)
        if on_batch:
            on_batch(len(out), len(prompts), time.perf_counter() - started)
    return out


def pairs_from_samples(rows: Sequence[dict], samples: Sequence[Sequence[str]],
                       passes: Callable[[str, str], bool], seed: int) -> tuple[list[dict], dict[str, int]]:
    """Pairs from graded samples (see the module docstring) and the counts: prompts, all_pass, all_fail, pairs."""
    pairs: list[dict] = []
    counts = {"prompts": len(rows), "all_pass": 0, "all_fail": 0, "pairs": 0, "samples": 0}
    rng = random.Random(seed)
    for row, answers in zip(rows, samples):
        reference = row["messages"][-1]["content"]
        good, bad = [], []
        for answer in dict.fromkeys(a for a in answers if a):
            (good if passes(answer, reference) else bad).append(answer)
        counts["samples"] += len(answers)
        if not bad:
            counts["all_pass"] += 1
            continue
        if not good:
            counts["all_fail"] += 1
            continue
        rng.shuffle(good)
        rng.shuffle(bad)
        for k, (chosen, rejected) in enumerate(zip(good, bad)):
            if normalize_prompt(chosen) == normalize_prompt(rejected):
                continue
            pairs.append({"id": f"{row['id']}#{k + 1}", "prompt_id": row["id"], "messages": row["messages"][1:-1]
                          if row["messages"][0]["role"] == "system" else row["messages"][:-1],
                          "chosen": chosen, "rejected": rejected})
    counts["pairs"] = len(pairs)
    return pairs, counts


def spec_graders(spec_json: dict) -> Any:
    """The spec's graders (tt_stagekit.graders.from_spec, a GraderSet): `passes(answer, reference)`, their names,
    and `timeout_note()` when a regex grader ran past its time limit (that answer failed)."""
    from tt_stagekit.graders import from_spec

    return from_spec(spec_json)


def reference_logps(model: Any, rows: Sequence[Encoded], pad_id: int, device: str, batch_size: int,
                    reference: str, counter: Optional[dict] = None) -> list[float]:
    """Summed completion log-probs of `rows` under the reference: "sft", the loaded SFT adapter as it is (before
    any preference step), or "base", the same model with the adapter disabled; never a second model."""
    import contextlib

    import torch

    from tt_engine_adapter.runtime.preference.logps import completion_logps
    from tt_engine_adapter.runtime.prefix import Sharing
    from tt_stagekit.protocol import log

    sharing = Sharing.decide(model, False, False, False)  # no backward here: gradient checkpointing never runs
    log(sharing.reason)

    out: list[float] = []
    model.eval()
    off = model.disable_adapter() if reference == "base" else contextlib.nullcontext()
    with torch.inference_mode(), off:
        for start in range(0, len(rows), batch_size):
            sums, _, _ = completion_logps(model, rows[start:start + batch_size], pad_id, device, sharing)
            out += [float(v) for v in sums.float().cpu()]
            if counter is not None:
                counter["forwards"] = counter.get("forwards", 0) + 1
    return out
