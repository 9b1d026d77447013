"""Bench: 8 clients over 4 adapters on ONE server, against 4 single-adapter servers, against one server of one
adapter: answers per second and resident memory (issue 43; docs/performance.md "Many adapters").

    <adapter env>/bin/python bench/serve_many.py [--hidden 512] [--layers 8] [--clients 8] [--per-client 12]
        [--max-tokens 16] [--threads 1]

Builds a Llama-style base (`hidden` x `layers`, random weights, large enough that its weights show in the
resident memory), trains four adapters on it (`testing.tiny_adapters`), then runs three setups, one after the
other, each with `--clients` client processes sending `--per-client` greedy requests (`max_tokens`):

- `many`: one server (`served_models`: the four adapters, applied by tt's LoRA bank, `serve/lora_bank.py`),
  client k asks adapter k % 4, so the batches mix adapters;
- `separate`: four servers, each one adapter (`adapter_path`), client k asks server k % 4;
- `single`: one server of one adapter, every client asks it.

Every server runs with `TT_NUM_THREADS=--threads` and 8 sequences per batch. Prints one JSON object per setup
(answers, seconds, answers/s, completion tokens and tokens/s: the adapters' answers differ in length, so
tokens/s is the fairer rate; every server's VmRSS and their sum in MiB, the load average before and after)
and a summary: many/single throughput and many/separate memory.

`--forward-only` measures what a mixed batch costs instead, with no server: one decode forward of `--clients`
rows (one token each; ms, the mean of 30, after one unmeasured), four ways: PEFT with one adapter (what the
single-adapter server runs), PEFT's per-row `adapter_names` with the four adapters mixed (what the many-adapter
server ran before the bank), the bank with every row on one adapter, and the bank with the four mixed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _client(args: tuple[str, str, int, int, int]) -> tuple[int, int]:
    """(answers, completion tokens) of one client's requests."""
    import urllib.request

    url, model, per_client, max_tokens, k = args
    answered = tokens = 0
    for i in range(per_client):
        body = json.dumps({"model": model, "temperature": 0, "max_tokens": max_tokens,
                           "messages": [{"role": "user", "content": f"review {k}-{i}: the film was great"}]}).encode()
        request = urllib.request.Request(f"{url}/v1/chat/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as reply:
            answer = json.loads(reply.read())
            answered += reply.status == 200 and bool(answer["choices"])
            tokens += answer["usage"]["completion_tokens"]
    return answered, tokens


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _drive(targets: list[tuple[str, str]], clients: int, per_client: int,
           max_tokens: int) -> tuple[int, int, float]:
    jobs = [(*targets[k % len(targets)], per_client, max_tokens, k) for k in range(clients)]
    _drive_once(targets, max_tokens)  # warm every server and adapter once
    started = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(clients) as pool:
        counts = pool.map(_client, jobs)
    return sum(a for a, _ in counts), sum(t for _, t in counts), time.perf_counter() - started


def _drive_once(targets: list[tuple[str, str]], max_tokens: int) -> None:
    for k, target in enumerate(targets):
        _client((*target, 1, max_tokens, k))


def _setup(name: str, servers: list, targets: list[tuple[str, str]], args: argparse.Namespace) -> dict:
    load_before = Path("/proc/loadavg").read_text().strip()
    answered, tokens, seconds = _drive(targets, args.clients, args.per_client, args.max_tokens)
    rss = [round(_rss_mib(s.process.pid), 1) for s in servers]
    return {"setup": name, "servers": len(servers), "answers": answered, "seconds": round(seconds, 2),
            "answers_per_s": round(answered / seconds, 3), "completion_tokens": tokens,
            "tokens_per_s": round(tokens / seconds, 2), "rss_mib": rss, "rss_total_mib": round(sum(rss), 1),
            "loadavg_before": load_before, "loadavg_after": Path("/proc/loadavg").read_text().strip()}


def _forwards(base: Path, folders: list[Path], rows: int) -> dict:
    import torch
    from peft import PeftModel

    from tt_engine_adapter.runtime import model_source
    from tt_engine_adapter.serve.lora_bank import LoraBank

    torch.set_num_threads(int(os.environ["TT_NUM_THREADS"]))
    model = PeftModel.from_pretrained(model_source.load_model(str(base), "cpu", torch.float32), str(folders[0]),
                                      adapter_name="a0")
    for k, folder in enumerate(folders[1:], 1):
        model.load_adapter(str(folder), adapter_name=f"a{k}")
    model.eval()
    banked = model_source.load_model(str(base), "cpu", torch.float32).eval()
    bank = LoraBank(banked, len(folders))
    slots = [bank.install(bank.read(folder)) for folder in folders]
    ids = torch.randint(0, 400, (rows, 1))
    mixed = [i % len(folders) for i in range(rows)]

    def timed(forward) -> float:
        with torch.inference_mode():
            forward()
            started = time.perf_counter()
            for _ in range(30):
                forward()
        return round((time.perf_counter() - started) / 30 * 1000, 2)

    def on_bank(row_slots: list[int]):
        def forward():
            with bank.rows(row_slots):
                banked(input_ids=ids)
        return forward

    load_before = Path("/proc/loadavg").read_text().strip()
    return {"rows": rows, "peft_one_adapter_ms": timed(lambda: model(input_ids=ids)),
            "peft_names_four_mixed_ms": timed(lambda: model(input_ids=ids, adapter_names=[f"a{i}" for i in mixed])),
            "bank_one_adapter_ms": timed(on_bank([slots[0]] * rows)),
            "bank_four_mixed_ms": timed(on_bank([slots[i] for i in mixed])),
            "loadavg_before": load_before, "loadavg_after": Path("/proc/loadavg").read_text().strip()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--per-client", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--forward-only", action="store_true")
    args = parser.parse_args()
    os.environ["TT_NUM_THREADS"] = str(args.threads)

    from tt_engine_adapter.testing import serving
    from tt_engine_adapter.testing.tiny_adapters import SYSTEMS, build as build_adapters
    from tt_engine_adapter.testing.tiny_model import build

    with tempfile.TemporaryDirectory(prefix="tt-bench-many-") as tmp:
        root = Path(tmp)
        base = build(root / "base", arch="llama", hidden=args.hidden, layers=args.layers)
        folders = build_adapters(base, root / "adapters", count=4, steps=20)
        if args.forward_only:
            print(json.dumps(_forwards(base, folders, args.clients)))
            return 0
        served = [{"name": f"tuned-{k}", "path": str(folder), "version": 1, "system_message": SYSTEMS[k],
                   "manifest_sha256": hashlib.sha256((folder / "artifact-manifest.json").read_bytes()).hexdigest()}
                  for k, folder in enumerate(folders)]
        results = []
        common = {"max_concurrency": 8, "max_queue": 64}
        with serving.start(root / "many", base, model_name="tuned-0", served_models=served, **common) as server:
            results.append(_setup("many", [server], [(server.url, f"tuned-{k}@1") for k in range(4)], args))
        servers = [serving.start(root / f"separate-{k}", base, adapter_path=folder, model_name=f"tuned-{k}",
                                 system_message=SYSTEMS[k], **common) for k, folder in enumerate(folders)]
        try:
            results.append(_setup("separate", servers, [(s.url, f"tuned-{k}") for k, s in enumerate(servers)], args))
        finally:
            for s in servers:
                s.stop()
        with serving.start(root / "single", base, adapter_path=folders[0], model_name="tuned-0",
                           system_message=SYSTEMS[0], **common) as server:
            results.append(_setup("single", [server], [(server.url, "tuned-0")], args))
    for result in results:
        print(json.dumps(result))
    by = {r["setup"]: r for r in results}
    print(json.dumps({"summary": True, "many_vs_single_throughput": round(by["many"]["answers_per_s"]
                                                                        / by["single"]["answers_per_s"], 3),
                      "many_vs_single_tokens_per_s": round(by["many"]["tokens_per_s"] / by["single"]["tokens_per_s"], 3),
                      "many_vs_separate_memory": round(by["many"]["rss_total_mib"]
                                                       / by["separate"]["rss_total_mib"], 3),
                      "many_vs_single_memory": round(by["many"]["rss_total_mib"] / by["single"]["rss_total_mib"], 3),
                      "args": vars(args)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
