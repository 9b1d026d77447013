"""Stage `reference`: the preference pairs and their reference log-probs, computed once.

Loads the base model with the train stage's (SFT) adapter, one model in memory. Pairs are derived
(`preference.pairs: "derived"`: the SFT adapter sampled on the prepare stage's training rows only, graded by
the spec's graders, runtime/preference/pairs.py) or read from the spec's pairs file (checked again here by the
rules `tt validate` applied). Each pair is rendered as two SFT rows and its chosen, rejected and KL
(KTO) completions scored under the reference (`preference.reference`: the SFT adapter, or the base with it
disabled). While it samples, a progress event after each batch of `hyperparameters.eval_batch_size` prompts
(unit "prompt", the answers so far and their rate) moves the host's bar, as the evaluation's does. Writes
`reference/pairs.jsonl`, one line per pair with its text and reference log-probs.

The stage's fingerprint holds what the pairs and log-probs depend on (the chain up to `sft`, the pairs'
source and sampling settings, the reference), never the loss, beta or the optimizer: a rerun that changes
only those reuses this stage and computes no reference forward (`reference.forwards` is this stage's count;
the preference stage reports its own, 0).
"""

from __future__ import annotations

import time

from tt_engine_adapter.runtime import model_source
from tt_engine_adapter.runtime.config import AdapterRequest
from tt_stagekit.contract import StageResult
from tt_stagekit.files import atomic_write_jsonl
from tt_stagekit.protocol import InvalidInput, StageError, log, progress, read_request, run_main

model_source.go_offline()


def _derived(request: AdapterRequest, model, tokenizer, device: str) -> tuple[list[dict], dict]:
    from tt_engine_adapter.runtime.data import read_jsonl
    from tt_engine_adapter.runtime.preference.pairs import pairs_from_samples, sample, spec_graders

    hp, pref = request.hp, request.spec.preference
    rows = read_jsonl(request.prepared["train"])  # the training rows only: the held-out prompts never come here
    graders = spec_graders(read_request(None)["spec"])
    names = [g.name for g in graders.graders]
    n = pref.samples_per_prompt
    batches = -(-len(rows) // hp.eval_batch_size)
    log(f"sampling {n} answers to each of {len(rows)} training prompts with the SFT adapter, {batches} batch(es) of "
        f"up to {hp.eval_batch_size} prompts (hyperparameters.eval_batch_size)")

    def report(done: int, total: int, seconds: float) -> None:  # the bar counts prompts, as the evaluation's does
        progress(done, total, "prompt", {"answers": done * n,
                                         "answers_per_second": round(done * n / max(seconds, 1e-9), 2)})

    started = time.perf_counter()
    samples = sample(model, tokenizer, [{"id": r["id"], "messages": r["messages"][:-1]} for r in rows],
                     n=n, temperature=pref.temperature,
                     max_new_tokens=pref.max_new_tokens or hp.max_new_tokens, max_seq_length=hp.max_seq_length,
                     device=device, seed=hp.seed, batch_size=hp.eval_batch_size, on_batch=report)
    seconds = time.perf_counter() - started
    pairs, counts = pairs_from_samples(rows, samples, graders.passes, hp.seed)
    counts["grader_timeouts"] = sum(graders.timeouts().values())
    if note := graders.timeout_note():
        log(note, "warning")
    graders.close()
    log(f"sampled {counts['samples']} answers on {counts['prompts']} training prompts in {seconds:.1f}s, graded by "
        f"{', '.join(names)}: {counts['pairs']} pairs; {counts['all_pass']} prompts all passed and "
        f"{counts['all_fail']} all failed (dropped)")
    if not pairs:
        raise InvalidInput(
            f"preference.pairs: no pair could be derived: of {counts['prompts']} training prompts, "
            f"{counts['all_pass']} had every sample pass the graders and {counts['all_fail']} every sample fail, "
            "so there is nothing to prefer; raise preference.samples_per_prompt or preference.temperature, or give "
            "a pairs file")
    return pairs, {f"reference.{k}": v for k, v in counts.items()} | {"reference.sampling_seconds": round(seconds, 3)}


def main(request: AdapterRequest) -> StageResult:
    from peft import PeftModel

    from tt_engine_adapter.formats.pairs import read_pairs
    from tt_engine_adapter.formats.rows import RowError
    from tt_engine_adapter.runtime import chat
    from tt_engine_adapter.runtime.preference.pairs import encode_kl, encode_pair, reference_logps

    hp, pref = request.hp, request.spec.preference
    if pref is None:
        raise InvalidInput("the reference stage needs the spec's preference block")
    base = model_source.resolved(request)
    device = model_source.pick_device(request)
    dtype = model_source.pick_dtype(device, hp.precision)
    tokenizer = model_source.load_tokenizer(base["path"])
    adapter = request.output("train", "adapter")
    if adapter is None:
        raise StageError("the train stage has not completed in this run")
    model = PeftModel.from_pretrained(model_source.load_model(base["path"], device, dtype, hp.load_in_4bit), adapter,
                                      is_trainable=False)
    metrics: dict = {}
    if pref.pairs == "derived":
        pairs, metrics = _derived(request, model, tokenizer, device)
    else:
        try:
            pairs = read_pairs(pref.pairs, request.system_message, [e.input for e in request.spec.examples])
        except RowError as exc:
            raise InvalidInput(f"preference.pairs: {exc}") from None
        log(f"{len(pairs)} pairs from {pref.pairs}")
    eot = chat.end_of_turn_id(tokenizer)
    try:
        encoded = [encode_pair(tokenizer, p, request.system_message, hp.max_seq_length, eot) for p in pairs]
        kl_rows = encode_kl(tokenizer, pairs, request.system_message, hp.max_seq_length, eot)
    except chat.ChatError as exc:
        raise InvalidInput(f"preference.pairs: {exc}") from None
    pad = chat.pad_token_id(tokenizer)
    counter: dict = {}
    started = time.perf_counter()
    rows = [c for c, _ in encoded] + [r for _, r in encoded] + kl_rows
    values = reference_logps(model, rows, pad, device, hp.eval_batch_size, pref.reference, counter)
    n = len(pairs)
    out = []
    for i, pair in enumerate(pairs):
        out.append({"id": pair["id"], "prompt_id": pair.get("prompt_id"), "messages": pair["messages"],
                    "chosen": pair["chosen"], "rejected": pair["rejected"], "ref_chosen": values[i],
                    "ref_rejected": values[n + i], "ref_kl": values[2 * n + i]})
    progress(n, n, "pair")
    path = request.stage_dir / "pairs.jsonl"
    atomic_write_jsonl(path, out)
    metrics.update({"reference.pairs": n, "reference.forwards": counter.get("forwards", 0),
                    "reference.seconds": round(time.perf_counter() - started, 3)})
    log(f"reference log-probs ({pref.reference}) of {n} pairs in {counter.get('forwards', 0)} forward passes")
    return StageResult(metrics=metrics, outputs={"pairs": str(path), "count": n, "reference": pref.reference})


if __name__ == "__main__":
    run_main(main, request_type=AdapterRequest)
