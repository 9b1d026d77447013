"""Bench: tt against TRL SFTTrainer + PEFT on a REAL pretrained base (SmolLM2-135M-Instruct, scripts/real-base).

Run in an adapter engine env that also has the `bench` group (TRL):

    cd plugins/adapter && UV_PROJECT_ENVIRONMENT=/tmp/tt-bench/adapter uv sync --locked --group runtime --group bench
    OMP_WAIT_POLICY=PASSIVE /tmp/tt-bench/adapter/bin/python bench/adapter_real_vs_trl.py [--repeats 1]

Both trainers get the same base folder, the same rows (examples/adapter-real: 60 customer messages routed to one
of five teams; every fifth held out), rendered with the model's own chat template (TRL: conversational
prompt-completion, loss on the completion only), the same LoRA settings (all linear layers, rank 8), batch,
epochs, constant learning rate, AdamW, clipping and seed. Each runs with its own defaults otherwise: TRL's
SFTConfig turns gradient checkpointing on, tt's does not (`--arm tt_checkpointing`: tt with it on;
`--arm trl_no_checkpointing`: TRL without). Each arm trains in its own process, so its peak RSS
(ru_maxrss) is its own: loading, training and evaluating.

Figures: training tokens/s (non-pad tokens fed / wall seconds of the training loop, tokenization and loading
excluded), peak RSS (loading, training, evaluating), held-out exact match of each trained adapter (both
answered by tt's batched greedy evaluation, so the comparison is of the training) and of the base model, and,
on the base model (its answers are sentences that run to the budget, the baseline stage's case; 32 new tokens),
held-out prompts/s of tt's batched evaluation against one `model.generate` per prompt. Prints one JSON object (`RESULT {...}`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parents[1]
SYSTEM = ("Route the customer message to one team: billing, shipping, returns, account or technical. "
          "Answer with the team name only.")
HP = {"n_epochs": 2, "learning_rate": 2e-3, "batch_size": 8, "gradient_accumulation_steps": 1, "lora_rank": 8,
      "lora_alpha": 16.0, "lora_dropout": 0.0, "lora_target_modules": "all-linear", "max_seq_length": 128,
      "warmup_ratio": 0.0, "lr_scheduler": "constant", "weight_decay": 0.0, "max_grad_norm": 1.0, "seed": 7,
      "checkpoint_interval_steps": 10**9, "keep_checkpoints": 1, "max_new_tokens": 4}


def data() -> tuple[list[dict], list[dict]]:
    sys.path.insert(0, str(REPO / "examples" / "adapter-real"))
    from make_data import examples

    rows = [{"id": f"r{i}", "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": e["input"]},
                                         {"role": "assistant", "content": e["output"]}]}
            for i, e in enumerate(examples())]
    return [r for i, r in enumerate(rows) if i % 5], [r for i, r in enumerate(rows) if i % 5 == 0]


def exact_match(model, tok, held_out: list[dict]) -> tuple[float, float]:
    """tt's batched greedy evaluation: (exact match, seconds)."""
    from tt_engine_adapter.runtime import generate

    prompts = [{"id": r["id"], "messages": r["messages"][:2]} for r in held_out]
    started = time.perf_counter()
    got = generate.generate(model, tok, prompts, max_new_tokens=HP["max_new_tokens"], batch_size=16,
                            max_seq_length=HP["max_seq_length"], device="cpu")
    seconds = time.perf_counter() - started
    hits = sum(g["prediction"].strip().lower() == r["messages"][2]["content"] for g, r in zip(got, held_out))
    return hits / len(held_out), seconds


def eval_speed(model, tok, held_out: list[dict], max_new_tokens: int) -> dict:
    """Held-out prompts/s of tt's batched evaluation against a plain `model.generate` per prompt (what a user
    without batching writes), both after one warm-up generation, both greedy with the same budget and stops."""
    import torch

    from tt_engine_adapter.runtime import chat, generate

    stops = chat.stop_ids(tok)
    prompts = [{"id": r["id"], "messages": r["messages"][:2]} for r in held_out]
    generate.generate(model, tok, prompts[:1], max_new_tokens=2, batch_size=1, max_seq_length=128, device="cpu")
    started = time.perf_counter()
    batched = generate.generate(model, tok, prompts, max_new_tokens=max_new_tokens, batch_size=16,
                                max_seq_length=HP["max_seq_length"], device="cpu")
    batched_seconds = time.perf_counter() - started
    started = time.perf_counter()
    for r in held_out:
        ids = torch.tensor([chat.encode_prompt(tok, r["messages"][:2], HP["max_seq_length"])[0]])
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                           do_sample=False, eos_token_id=stops, pad_token_id=stops[0])
    single_seconds = time.perf_counter() - started
    return {"max_new_tokens": max_new_tokens, "batched": round(len(held_out) / batched_seconds, 2),
            "one_at_a_time": round(len(held_out) / single_seconds, 2),
            "answer_words": sum(len(b["prediction"].split()) for b in batched)}


def arm_tt(base: Path, train: list[dict], held_out: list[dict], checkpointing: bool = False) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tt_engine_adapter.runtime import chat, memory
    from tt_engine_adapter.runtime import train as loop
    from tt_engine_adapter.runtime.config import AdapterSettings
    from tt_engine_adapter.runtime.data import encode_rows

    tok = AutoTokenizer.from_pretrained(base)
    encoded = encode_rows(tok, train, HP["max_seq_length"])
    hp = AdapterSettings(**HP, gradient_checkpointing=checkpointing)
    torch.manual_seed(hp.seed)
    model = loop.wrap_lora(memory.prepare_base(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), hp), hp)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        state = loop.train(model, encoded, hp, pad_id=chat.pad_token_id(tok), device="cpu", autocast_dtype=None,
                           checkpoint_dir=Path(tmp) / "ck", stage_fingerprint="bench", resume=False)
        wall = time.perf_counter() - started
    model.eval()
    em, _ = exact_match(model, tok, held_out)
    return {"tokens": state.tokens, "seconds": round(wall, 2), "tokens_per_second": round(state.tokens / wall, 2),
            "final_loss": state.losses[-1][1], "exact_match": round(em, 3)}


def arm_base(base: Path, train: list[dict], held_out: list[dict]) -> dict:
    """The base model as it ships: its held-out exact match, and evaluation speed where it matters, on its
    sentence answers (the baseline stage's case: every answer runs to the budget)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base).eval()
    return {"exact_match": round(exact_match(model, tok, held_out)[0], 3),
            "eval_prompts_per_second": eval_speed(model, tok, held_out, 32)}


def arm_trl(base: Path, train: list[dict], held_out: list[dict], checkpointing: bool = True) -> dict:
    import datasets
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    datasets.disable_progress_bars()
    tok = AutoTokenizer.from_pretrained(base)
    rows = Dataset.from_list([{"prompt": r["messages"][:2], "completion": r["messages"][2:]} for r in train])
    torch.manual_seed(HP["seed"])
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    with tempfile.TemporaryDirectory() as tmp:
        config = SFTConfig(
            output_dir=tmp, per_device_train_batch_size=HP["batch_size"], gradient_accumulation_steps=1,
            num_train_epochs=HP["n_epochs"], learning_rate=HP["learning_rate"], lr_scheduler_type="constant",
            warmup_steps=0, weight_decay=0.0, max_grad_norm=HP["max_grad_norm"], logging_steps=1, save_strategy="no",
            report_to=[], seed=HP["seed"], max_length=HP["max_seq_length"], packing=False, completion_only_loss=True,
            dataloader_num_workers=0, use_cpu=True, disable_tqdm=True, optim="adamw_torch", dataset_num_proc=None,
            gradient_checkpointing=checkpointing)
        peft_config = LoraConfig(r=HP["lora_rank"], lora_alpha=HP["lora_alpha"], lora_dropout=HP["lora_dropout"],
                                 target_modules=HP["lora_target_modules"], bias="none", task_type="CAUSAL_LM")
        trainer = SFTTrainer(model=model, args=config, train_dataset=rows, processing_class=tok,
                             peft_config=peft_config)
        tokens = sum(len(ids) for ids in trainer.train_dataset["input_ids"]) * HP["n_epochs"]
        started = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - started
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    trained = trainer.model.eval()
    em, _ = exact_match(trained, tok, held_out)
    return {"tokens": tokens, "seconds": round(wall, 2), "tokens_per_second": round(tokens / wall, 2),
            "final_loss": losses[-1] if losses else None, "exact_match": round(em, 3)}


def today(shared: bool, logits_only: bool) -> None:
    """This process's tt without the shared prefix (`shared` False) and/or with the head on every position
    (`logits_only` False): the paths before issue 52, for a side-by-side ratio."""
    import contextlib

    from tt_engine_adapter.runtime import logits, prefix

    if not shared:
        prefix.Sharing.decide = staticmethod(lambda *a, **k: prefix.Sharing(False, "shared prefix off (bench arm)"))
    if not logits_only:
        logits.only = lambda model, where: contextlib.nullcontext()


def step_paths(base: Path, repeats: int) -> dict:
    """tt's SFT step (loss and backward of one micro-batch of 8 training rows) through its paths in one process,
    interleaved `repeats` times: the ratios hold under a moving load, unlike arms run one after another."""
    import contextlib

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tt_engine_adapter.runtime import batches, chat, logits, memory
    from tt_engine_adapter.runtime import train as loop
    from tt_engine_adapter.runtime.config import AdapterSettings
    from tt_engine_adapter.runtime.data import encode_rows
    from tt_engine_adapter.runtime.prefix import Sharing

    tok = AutoTokenizer.from_pretrained(base)
    train, _ = data()
    rows = encode_rows(tok, train, HP["max_seq_length"])
    hp = AdapterSettings(**HP)
    model = loop.wrap_lora(memory.prepare_base(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), hp), hp)
    model.train()
    micro = [batches.collate(rows[i:i + 8], chat.pad_token_id(tok)).inputs for i in range(0, 48, 8)]
    on, off, only = Sharing.decide(model, False, False, False), Sharing(False, ""), logits.only
    paths = {"now": (on, only), "unshared": (off, only),
             "before_issue_52": (off, lambda m, w: contextlib.nullcontext())}
    best: dict = {name: None for name in paths}
    for _ in range(repeats):
        for name, (sharing, head) in paths.items():
            logits.only = head
            started = time.perf_counter()
            for inputs in micro:
                targets = int((inputs["labels"][:, 1:] != chat.IGNORE_INDEX).sum())
                (sharing.loss_sum(model, model, inputs) / targets).backward()
            took = time.perf_counter() - started
            model.zero_grad(set_to_none=True)
            best[name] = took if best[name] is None else min(best[name], took)
            print(name, round(took, 2), "s", file=sys.stderr, flush=True)
    logits.only = only
    return {"seconds_for_6_micro_batches": {k: round(v, 2) for k, v in best.items()}, "repeats": repeats,
            "speedup_over_before": round(best["before_issue_52"] / best["now"], 2),
            "speedup_of_sharing": round(best["unshared"] / best["now"], 2),
            "threads": torch.get_num_threads(), "load_average": os.getloadavg()}


def arm(name: str, base: Path) -> None:
    import torch

    if os.environ.get("TT_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["TT_NUM_THREADS"]))
    train, held_out = data()
    arms = {"tt": arm_tt, "trl": arm_trl, "base": arm_base,
            "tt_checkpointing": lambda *a: arm_tt(*a, checkpointing=True),
            "trl_no_checkpointing": lambda *a: arm_trl(*a, checkpointing=False),
            "tt_unshared": lambda *a: (today(shared=False, logits_only=True), arm_tt(*a))[1],
            "tt_full_logits": lambda *a: (today(shared=False, logits_only=False), arm_tt(*a))[1]}
    result = arms[name](base, train, held_out)
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print("ARM " + json.dumps(result), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", type=Path, help="the model folder (default: scripts/real-base's)")
    parser.add_argument("--repeats", type=int, default=1)
    arms = ["tt", "trl", "base", "tt_checkpointing", "trl_no_checkpointing", "tt_unshared", "tt_full_logits"]
    parser.add_argument("--arm", choices=arms,
                        help="run one arm alone (tt_checkpointing: tt with gradient_checkpointing, as TRL's "
                             "SFTConfig defaults to; trl_no_checkpointing: TRL without, as tt defaults to; "
                             "tt_unshared: tt without the shared prefix; tt_full_logits: tt without the shared "
                             "prefix and with logits on every position, the path before issue 52)")
    parser.add_argument("--also", nargs="*", default=[], choices=arms[3:],
                        help="more arms interleaved with tt and trl in every repeat (their tokens/s and ratio "
                             "to trl reported too)")
    parser.add_argument("--step-paths", type=int, default=0, metavar="N",
                        help="time tt's SFT step through its paths (now, unshared, before issue 52) in one process, "
                             "N interleaved repeats; no arms run")
    args = parser.parse_args()
    base = args.base or Path(subprocess.run([str(REPO / "scripts" / "real-base")], check=True, capture_output=True,
                                            text=True, env={**os.environ, "TT_REAL_BASE_PYTHON": sys.executable})
                             .stdout.strip().splitlines()[-1])
    if args.arm:
        arm(args.arm, base)
        return 0
    if args.step_paths:
        print("PATHS " + json.dumps(step_paths(base, args.step_paths)))
        return 0
    runs: dict[str, list[dict]] = {"tt": [], "trl": [], "base": [], **{name: [] for name in args.also}}
    for repeat in range(args.repeats):  # interleaved, so background load hits both alike
        for name in (("base",) if repeat == 0 else ()) + ("tt", "trl") + tuple(args.also):
            out = subprocess.run([sys.executable, __file__, "--arm", name, "--base", str(base)], check=True,
                                 capture_output=True, text=True).stdout
            runs[name].append(json.loads(next(line for line in out.splitlines() if line.startswith("ARM "))[4:]))
            print(name, json.dumps(runs[name][-1]), file=sys.stderr, flush=True)
    best = {k: max(runs[k], key=lambda r: r["tokens_per_second"]) for k in ("tt", "trl")}
    train, held_out = data()
    summary = {
        "base": str(base), "train_rows": len(train), "held_out": len(held_out), "hyperparameters": HP,
        "repeats": args.repeats, "load_average": os.getloadavg(),
        "tokens_per_second": {k: v["tokens_per_second"] for k, v in best.items()},
        "ratio_tt_over_trl": round(best["tt"]["tokens_per_second"] / best["trl"]["tokens_per_second"], 3),
        "peak_rss_mb": {k: max(r["peak_rss_mb"] for r in runs[k]) for k in ("tt", "trl")},
        "exact_match": {"base": runs["base"][0]["exact_match"], "tt": best["tt"]["exact_match"],
                        "trl": best["trl"]["exact_match"]},
        "eval_prompts_per_second": runs["base"][0]["eval_prompts_per_second"],
        "also": {name: {"tokens_per_second": max(r["tokens_per_second"] for r in runs[name]),
                        "ratio_over_trl": round(max(r["tokens_per_second"] for r in runs[name])
                                                / best["trl"]["tokens_per_second"], 3),
                        "exact_match": max(runs[name], key=lambda r: r["tokens_per_second"])["exact_match"]}
                 for name in args.also},
        "runs": runs,
    }
    print("RESULT " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
