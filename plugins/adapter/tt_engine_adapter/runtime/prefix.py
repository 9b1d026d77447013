"""The shared prefix computed once: the rows of an SFT micro-batch all start with the same compiled system
prompt (and chat template), so that prefix runs once and the rest of every row runs against its cached keys and
values, with the gradient flowing back into the prefix once. Runs in the engine environment.

Contract.
- `Sharing.decide(model, packing, gradient_checkpointing, distributed)` once per stage: on, or off with the
  reason (`Sharing.reason`) the stage logs once; off is today's path, every row its whole sequence. Off when:
  packing (rows laid end to end have no common start), gradient checkpointing (the recomputed layers would grow
  the cache a second time), under torchrun (DistributedDataParallel takes one forward per backward), a model
  with sliding-window or non-attention layers (its cache cannot be shared this way), or a model whose forward
  takes no cache.
- `shared(inputs)`: how many leading positions every row of a right-padded micro-batch shares (same tokens, no
  padding, no label on them nor on the token after: the prefix's own logits are never read), 0 when fewer
  than `MIN_PREFIX` or a single row.
- `Sharing.loss_sum(model, net, inputs)`: the summed next-token loss of the micro-batch, as
  `logits.token_loss_sum` computes it, through the shared prefix when there is one (logits only where the
  loss reads them either way); `Sharing.label_logps` the same for the preference rows' log-probs, and
  `Sharing.answer_logps` for GRPO, where each group's prompt is the prefix of its answers.

Equal to the unshared path within 1e-5 (loss and LoRA gradients, the real base, LoRA on every linear layer with
rsLoRA): tests/test_logits_only.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tt_engine_adapter.decode.prefix import cache_keyword, usable
from tt_engine_adapter.runtime.logits import IGNORE_INDEX, label_logps, token_loss_sum

MIN_PREFIX = 4  # shorter shared starts are not worth a second forward


def shared(inputs: dict) -> int:
    """Leading positions shared by every row of `inputs` (right-padded, `attention_mask` given), or 0."""
    ids, labels, mask = inputs["input_ids"], inputs["labels"], inputs.get("attention_mask")
    if ids.shape[0] < 2 or mask is None:
        return 0
    common = (ids == ids[:1]).all(0) & (mask == 1).all(0) & (labels == IGNORE_INDEX).all(0)
    run = int(common.int().cumprod(0).sum())  # leading positions that are common and unlabelled
    length = run - 1  # the last of them starts the rest: its logits predict the first label
    return length if length >= MIN_PREFIX else 0


@dataclass(frozen=True)
class Sharing:
    """Whether this stage shares the micro-batch prefix, and the model's cache keyword."""

    on: bool
    reason: str
    cache_kwarg: str = "cache"

    @staticmethod
    def decide(model: Any, packing: bool, gradient_checkpointing: bool, distributed: bool) -> "Sharing":
        off: Optional[str] = (
            "hyperparameters.packing is on (packed rows share no start)" if packing else
            "hyperparameters.gradient_checkpointing is on (recomputed layers would grow the cached prefix twice)"
            if gradient_checkpointing else
            "training runs under torchrun (one forward per backward)" if distributed else usable(model))
        if off:
            return Sharing(False, f"shared prefix off: {off}; every row runs its whole sequence")
        return Sharing(True, "shared prefix on: the rows' common start (system prompt) runs once per micro-batch",
                       cache_keyword(model))

    def loss_sum(self, model: Any, net: Any, inputs: dict) -> Any:
        length = shared(inputs) if self.on else 0
        if not length:
            return token_loss_sum(model, net, inputs)
        return token_loss_sum(model, model, self.suffix(model, inputs, length))

    def label_logps(self, model: Any, inputs: dict, labels: Any) -> Any:
        """`logits.label_logps` (`[rows, width - 1]`, 0 where unlabelled) through the shared prefix when there is
        one: the preference rows' completion log-probs (reference and preference stages)."""
        import torch

        length = shared({**inputs, "labels": labels}) if self.on else 0
        if not length:
            return label_logps(model, model, inputs, labels)
        rest = self.suffix(model, {**inputs, "labels": labels}, length)
        tail = label_logps(model, model, {k: v for k, v in rest.items() if k != "labels"}, rest["labels"])
        return torch.cat([tail.new_zeros(tail.shape[0], length), tail], dim=1)

    def suffix(self, model: Any, inputs: dict, length: int) -> dict:
        """The rows after their shared `length` positions, with the prefix's keys and values (one forward, the
        cache repeated per row: differentiable, so the gradient reaches the prefix's LoRA weights once)."""
        import torch
        from transformers import DynamicCache

        ids = inputs["input_ids"]
        rows, width = ids.shape
        cache = DynamicCache()
        model(input_ids=ids[:1, :length], use_cache=True, logits_to_keep=1, **{self.cache_kwarg: cache})
        cache.batch_repeat_interleave(rows)
        positions = torch.arange(length, width, device=ids.device).unsqueeze(0).expand(rows, -1)
        return {"input_ids": ids[:, length:], "attention_mask": inputs["attention_mask"], "position_ids": positions,
                "labels": inputs["labels"][:, length:], "use_cache": True, self.cache_kwarg: cache}

    def answer_logps(self, model: Any, full: dict, part: slice, group_size: int, temperature: float) -> Any:
        """GRPO: `grpo.token_logps` of rows `part` of `full` (reinforcement.train.batch_tensors: prompts
        left-padded, answers right-padded), each group's prompt (all but its last token) run once."""
        import torch
        from transformers import DynamicCache

        from tt_engine_adapter.runtime.reinforcement.grpo import answer_labels, token_logps

        ids, attn, positions, mask, n = (full[k][part] if k != "n" else full[k]
                                         for k in ("input_ids", "attention_mask", "position_ids", "mask", "n"))
        length = ids.shape[1] - n - 1
        groups = [i // group_size for i in range(part.start, part.stop)]
        firsts = sorted(set(groups))
        if not self.on or length < MIN_PREFIX or len(firsts) == len(groups):
            return token_logps(model, ids, attn, n, temperature, positions, mask)
        heads = torch.tensor([groups.index(g) for g in firsts], device=ids.device)
        cache = DynamicCache()
        model(input_ids=ids[heads, :length], attention_mask=attn[heads, :length],
              position_ids=positions[heads, :length], use_cache=True, logits_to_keep=1, **{self.cache_kwarg: cache})
        cache.batch_select_indices(torch.tensor([firsts.index(g) for g in groups], device=ids.device))
        rest = {"input_ids": ids[:, length:], "attention_mask": attn, "position_ids": positions[:, length:],
                "use_cache": True, self.cache_kwarg: cache}
        return label_logps(model, model, rest, answer_labels(ids[:, length:], n, mask), temperature)[:, -n:]
