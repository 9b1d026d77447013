"""tt's own batched LoRA for the many-adapter server: every resident adapter in one bank of slots on the base.

`LoraBank(model)` turns each `nn.Linear` of the base that an adapter targets into a `BankedLinear` (same
module, same weights, its class swapped once) whose forward is `base(x) + lora`. Per targeted module a `Site`
holds, for every slot, the adapter's A and B (stacked, transposed for the batched product: `at` (slots, in,
r_max), `bt` (slots, r_max, out); a smaller rank is padded with zeros, a module an adapter does not target is
zeros) and, for the single-adapter pass, the adapter's own A (r, in) and B (out, r) as PEFT holds them. The
scaling is the adapter's `lora_alpha / r` (`/ sqrt(r)` with `use_rslora`), applied after B as PEFT does.

The scheduler names each row's slot for one forward pass (`with bank.rows(slots):`):
- every row the same slot: `result + linear(linear(x, A), B) * scaling`, PEFT's `lora.Linear.forward` op for
  op (dropout is the identity at inference), so the logits are PEFT's bits;
- mixed rows: one gather of each row's A and B (`index_select` on the slot ids, one tensor per pass) and one
  `bmm` pair, `result + bmm(bmm(x, At[ids]), Bt[ids]) * scaling[ids]` (S-LoRA / Punica's gathered matmul).
LoRA weights are float32 when the base is float16/bfloat16 (as PEFT upcasts them), the input cast to them
and the sum cast back.

Loading (`read` then `install`): `adapter_config.json` is read as data and `adapter_model.safetensors` with
safetensors (never pickle). `Refused` (nothing loaded) names what the bank cannot apply exactly: DoRA,
`modules_to_save`, a bias, `fan_in_fan_out`, per-layer ranks or targets, any other LoRA variant or setting
not at its default, a weight that is not a LoRA A/B, a target that is not an `nn.Linear`, a shape that does not
fit. `free(slot)` zeroes the slot (no stale weights can answer) and the next install reuses it.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

import torch
from torch import nn
from torch.nn import functional as F

CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
_KEY = re.compile(r"base_model\.model\.(?P<module>.+)\.lora_(?P<which>[AB])\.weight")
# settings that do not change what a loaded LoRA computes (targets come from the weights themselves)
_HARMLESS = {"base_model_name_or_path", "revision", "task_type", "peft_type", "peft_version", "inference_mode",
             "init_lora_weights", "lora_dropout", "target_modules", "exclude_modules", "r", "lora_alpha",
             "use_rslora", "auto_mapping", "megatron_core", "qalora_group_size", "layers_pattern", "bias",
             "eva_config", "corda_config", "loftq_config", "lora_ga_config", "ensure_weight_tying"}
_NAMED = {"use_dora": "DoRA", "modules_to_save": "modules_to_save (full copies of modules)",
          "fan_in_fan_out": "fan_in_fan_out (Conv1D weights)", "layers_to_transform": "layers_to_transform",
          "rank_pattern": "rank_pattern (per-module ranks)", "alpha_pattern": "alpha_pattern (per-module alphas)",
          "lora_bias": "lora_bias", "trainable_token_indices": "trainable_token_indices"}


class Refused(ValueError):
    """An adapter the bank cannot apply exactly; it is not loaded. The message names the setting."""


@dataclass
class Prepared:
    """An adapter read and checked against the base, not yet in a slot."""

    scaling: float
    weights: dict[str, tuple[torch.Tensor, torch.Tensor]]  # module name -> (A (r, in), B (out, r))


def read_config(folder: str | Path) -> tuple[int, float]:
    """(r, scaling) of a LoRA adapter folder's config; Refused naming a setting the bank does not apply."""
    try:
        config = json.loads((Path(folder) / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise Refused(f"cannot read its {CONFIG} ({exc})") from None
    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        raise Refused(f"its {CONFIG} is not a LoRA adapter (peft_type {config.get('peft_type')!r})"
                      if isinstance(config, dict) else f"its {CONFIG} is not an object")
    if config.get("bias", "none") != "none":
        raise Refused(f"bias {config['bias']!r} (only 'none' is applied)")
    for key, value in config.items():
        if key not in _HARMLESS and value not in (None, False, {}, []):
            raise Refused(f"{_NAMED.get(key, key)} is set ({key}: {json.dumps(value)[:80]}); the many-adapter "
                          "server applies plain LoRA only")
    r, alpha = config.get("r"), config.get("lora_alpha")
    if not isinstance(r, int) or isinstance(r, bool) or r <= 0 or not isinstance(alpha, (int, float)) or \
            isinstance(alpha, bool):
        raise Refused(f"r {r!r} / lora_alpha {alpha!r} are not a positive rank and a number")
    return r, (alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r)


class Site:
    """One targeted Linear's slots (see the module docstring)."""

    def __init__(self, linear: nn.Linear, slots: int, dtype: torch.dtype):
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.device, self.dtype = linear.weight.device, dtype
        self.at = torch.zeros(slots, self.in_features, 0, device=self.device, dtype=dtype)
        self.bt = torch.zeros(slots, 0, self.out_features, device=self.device, dtype=dtype)
        self.exact: dict[int, tuple[torch.Tensor, torch.Tensor, float]] = {}

    def grow(self, slots: int, rank: int) -> None:
        old_slots, old_rank = self.at.shape[0], self.at.shape[2]
        if slots <= old_slots and rank <= old_rank:
            return
        slots, rank = max(slots, old_slots), max(rank, old_rank)
        at = torch.zeros(slots, self.in_features, rank, device=self.device, dtype=self.dtype)
        bt = torch.zeros(slots, rank, self.out_features, device=self.device, dtype=self.dtype)
        at[:old_slots, :, :old_rank] = self.at
        bt[:old_slots, :old_rank] = self.bt
        self.at, self.bt = at, bt

    def put(self, slot: int, a: torch.Tensor, b: torch.Tensor, scaling: float) -> None:
        a = a.to(self.device, self.dtype).contiguous()
        b = b.to(self.device, self.dtype).contiguous()
        self.grow(slot + 1, a.shape[0])
        self.at[slot].zero_()
        self.bt[slot].zero_()
        self.at[slot, :, :a.shape[0]] = a.t()
        self.bt[slot, :a.shape[0]] = b.t()
        self.exact[slot] = (a, b, scaling)

    def clear(self, slot: int) -> None:
        self.exact.pop(slot, None)
        if slot < self.at.shape[0]:
            self.at[slot].zero_()
            self.bt[slot].zero_()


@dataclass
class _Pass:
    slots: list[int]
    single: Optional[int]  # the slot of every row, or None when they are mixed
    ids: Optional[torch.Tensor] = None  # (rows,) slot ids, built once per pass
    scales: Optional[torch.Tensor] = None  # (rows, 1, 1)


class BankedLinear(nn.Linear):
    """An `nn.Linear` of the base with the bank's LoRA added (its class swapped by `LoraBank`)."""

    _tt_site: Site
    _tt_bank: "LoraBank"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = F.linear(x, self.weight, self.bias)
        current, site = self._tt_bank.current, self._tt_site
        if current is None:
            return result
        if current.single is not None:
            exact = site.exact.get(current.single)
            if exact is None:
                return result
            a, b, scaling = exact
            x = x if x.dtype == a.dtype else x.to(a.dtype)
            return (result + F.linear(F.linear(x, a), b) * scaling).to(result.dtype)
        if not any(slot in site.exact for slot in current.slots):
            return result
        if x.dim() != 3 or x.shape[0] != current.ids.shape[0]:
            raise RuntimeError(f"a mixed pass of {current.ids.shape[0]} rows got an input of shape {tuple(x.shape)}")
        x = x if x.dtype == site.dtype else x.to(site.dtype)
        lora = torch.bmm(torch.bmm(x, site.at.index_select(0, current.ids)), site.bt.index_select(0, current.ids))
        return (result + lora * current.scales).to(result.dtype)


class LoraBank:
    """Resident LoRA adapters as slots over one base model (see the module docstring)."""

    def __init__(self, model: nn.Module, slots: int = 4):
        self.model = model
        weight = next(model.parameters())
        self.device = weight.device
        self.dtype = torch.float32 if weight.dtype in (torch.float16, torch.bfloat16) else weight.dtype
        self.capacity = max(1, slots)
        self.scales = torch.zeros(self.capacity, device=self.device, dtype=self.dtype)
        self.sites: dict[str, Site] = {}
        self._modules = dict(model.named_modules())
        self._used: set[int] = set()
        self.current: Optional[_Pass] = None

    @property
    def occupied(self) -> list[int]:
        """The slots holding an adapter."""
        return sorted(self._used)

    def read(self, folder: str | Path) -> Prepared:
        """The adapter in `folder`, checked against the base; Refused naming what does not fit."""
        from safetensors.torch import load_file

        rank, scaling = read_config(folder)
        path = Path(folder) / WEIGHTS
        if not path.is_file():
            raise Refused(f"it has no {WEIGHTS} (a pickled adapter_model.bin is never loaded)")
        try:
            tensors = load_file(str(path), device="cpu")
        except Exception as exc:  # safetensors raises its own error types
            raise Refused(f"cannot read its {WEIGHTS} ({exc})") from None
        halves: dict[str, dict[str, torch.Tensor]] = {}
        for key, tensor in tensors.items():
            match = _KEY.fullmatch(key)
            if match is None:
                raise Refused(f"its weights hold {key!r}, not a LoRA A or B of a Linear (modules_to_save, "
                              "embeddings, DoRA magnitudes and biases are not applied)")
            halves.setdefault(match["module"], {})[match["which"]] = tensor
        if not halves:
            raise Refused(f"its {WEIGHTS} holds no LoRA weights")
        weights = {}
        for name, pair in sorted(halves.items()):
            module = self._modules.get(name)
            if not isinstance(module, nn.Linear) or type(module) not in (nn.Linear, BankedLinear):
                raise Refused(f"its target {name!r} is " + ("not a module of the base" if module is None else
                                                            f"a {type(module).__name__}, not a Linear"))
            a, b = pair.get("A"), pair.get("B")
            if a is None or b is None:
                raise Refused(f"its target {name!r} has lora_{'A' if a is None else 'B'} missing")
            if tuple(a.shape) != (rank, module.in_features) or tuple(b.shape) != (module.out_features, rank):
                raise Refused(f"its target {name!r} has A {tuple(a.shape)} and B {tuple(b.shape)}; r {rank} on "
                              f"this Linear needs ({rank}, {module.in_features}) and ({module.out_features}, {rank})")
            if not a.is_floating_point() or not b.is_floating_point():
                raise Refused(f"its target {name!r} has weights of dtype {a.dtype}/{b.dtype}, not floating point")
            weights[name] = (a, b)
        return Prepared(scaling, weights)

    def install(self, prepared: Prepared) -> int:
        """Put a read adapter in the lowest free slot (growing the bank when every slot is used); its slot."""
        slot = min(set(range(self.capacity + 1)) - self._used)
        if slot >= self.capacity:
            self.capacity *= 2
            scales = torch.zeros(self.capacity, device=self.device, dtype=self.dtype)
            scales[:slot] = self.scales
            self.scales = scales
            for site in self.sites.values():
                site.grow(self.capacity, 0)
        for name, (a, b) in prepared.weights.items():
            self._site(name).put(slot, a, b, prepared.scaling)
        self.scales[slot] = prepared.scaling
        self._used.add(slot)
        return slot

    def free(self, slot: int) -> None:
        """Zero `slot` everywhere (no stale weights can answer); the next install may reuse it."""
        for site in self.sites.values():
            site.clear(slot)
        self.scales[slot] = 0
        self._used.discard(slot)

    @contextlib.contextmanager
    def rows(self, slots: list[int]) -> Iterator[None]:
        """Forward passes inside run row i with the adapter in `slots[i]`."""
        unknown = sorted(set(slots) - self._used)
        if unknown:
            raise RuntimeError(f"slots {unknown} hold no adapter")
        if len(set(slots)) == 1:
            current = _Pass(list(slots), slots[0])
        else:
            ids = torch.tensor(slots, device=self.device)
            current = _Pass(list(set(slots)), None, ids, self.scales.index_select(0, ids).view(-1, 1, 1))
        self.current = current
        try:
            yield
        finally:
            self.current = None

    def _site(self, name: str) -> Site:
        site = self.sites.get(name)
        if site is None:
            module: Any = self._modules[name]
            site = self.sites[name] = Site(module, self.capacity, self.dtype)
            module.__class__ = BankedLinear
            module._tt_site, module._tt_bank = site, self
        return site
