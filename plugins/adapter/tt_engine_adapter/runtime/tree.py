"""Every distinct token once: the rows of a micro-batch laid out as one prefix tree in a single sequence. Runs in
the engine environment.

Rows that start alike (the compiled system prompt of every SFT row; a GRPO group's prompt under each of its
answers; a preference pair's prompt under its chosen and rejected completions) share the nodes of their common
start: a token is one node per distinct path from the first token, at the position it has in its row, up to
the first position whose logits the row reads (from there on its nodes are its own). The
nodes run as one row, no padding, with an attention mask that lets a node see its ancestors and itself only,
so each node's hidden state at every layer is the one its path computes alone (the same keys and values, the
same rotary positions): the loss, its gradients and the log-probs equal the unshared path's within float
rounding (tests/test_prefix_tree.py, the real base). A node read by several rows gives each its logits; their
gradients add up in it, as they do in the shared prefix of `runtime/prefix.py`.

Against that cached-prefix path it runs one forward instead of two, no padding, and shares beyond the common
start of all rows (a group's prompt, a pair's prompt, equal first answer tokens); it pays attention over the
whole tree (`nodes²` scores). `Plan.cheaper` weighs both on a model's sizes; `MAX_NODES` bounds the mask.

- `plan(input_ids, keep, read)`: the tree of a batch (`keep`: bool `[rows, width]`, True on a row's tokens, which
  take positions 0, 1, ... in order: right padding, or left padding with positions from the mask; `read`: where
  logits are read), or None beyond `MAX_NODES`; `node_counts` the same walk's size after each row (how many
  rows fit a budget);
- `Plan.logits_at(model, net, where)`: `[positions, vocab]` logits at `where` (`[rows, width]`, row-major order,
  as `logits.forward_at` returns them) from one forward of the tree, the head on the nodes read alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Optional

from tt_engine_adapter.runtime.logits import only, picked

MAX_NODES = 4096  # the mask is nodes² entries: 16 M here (16 MB as bool)
ATTENTION_KINDS = ("sdpa", "eager")  # implementations that take a custom 4D mask as given


def implementation(model: Any) -> str:
    """The name of `model`'s attention implementation (`sdpa`, `eager`, `flash_attention_2`, ...)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return str(getattr(getattr(base, "config", None), "_attn_implementation", None))


def attention_kind(model: Any) -> Optional[str]:
    """The model's attention implementation when it takes a custom 4D mask, else None."""
    kind = implementation(model)
    return kind if kind in ATTENTION_KINDS else None


@dataclass(frozen=True)
class Plan:
    """One batch as a prefix tree: `ids`/`positions` `[1, nodes]`, `index` `[rows, width]` (the node of each
    kept position, -1 elsewhere) and `paths` (each row's nodes in order)."""

    ids: Any
    positions: Any
    index: Any
    paths: tuple

    @property
    def nodes(self) -> int:
        return int(self.ids.shape[1])

    def cheaper(self, hidden: int, rows: int, width: int, shared: int) -> bool:
        """Whether the tree costs less than the cached-prefix path on these sizes: a token through the linear
        layers costs about 24·hidden² multiply-adds a layer, an attention score about 4·hidden; the cached
        path runs `shared` positions once and the rest of every row padded to `width`."""
        score = 1.0 / (6.0 * hidden)
        tree = self.nodes + self.nodes ** 2 * score
        rest = rows * (width - shared)
        return tree < shared + rest + rest * width * score

    def mask(self, kind: str, dtype: Any) -> Any:
        """`[1, 1, nodes, nodes]`: a node attends to its ancestors and itself (bool for sdpa, additive for
        eager)."""
        import torch

        n = self.nodes
        seen = torch.zeros(n, n, dtype=torch.bool)
        for path in self.paths:
            path_t = torch.tensor(path, dtype=torch.long)
            low = torch.tril_indices(len(path), len(path))
            seen[path_t[low[0]], path_t[low[1]]] = True
        seen = seen.to(self.ids.device)
        if kind == "sdpa":
            return seen[None, None]
        return torch.zeros(n, n, dtype=dtype, device=self.ids.device).masked_fill(
            ~seen, torch.finfo(dtype).min)[None, None]

    def logits_at(self, model: Any, net: Any, where: Any) -> Any:
        """`[positions, vocab]` logits at `where` (row-major), from one forward of the tree."""
        import torch

        kind = attention_kind(model) or "eager"
        dtype = model.get_input_embeddings().weight.dtype
        if not dtype.is_floating_point:
            dtype = torch.float32
        nodes = self.index[where]
        need = torch.zeros(1, self.nodes, dtype=torch.bool, device=self.ids.device)
        need[0, nodes] = True
        with only(model, need):
            out = net(input_ids=self.ids, position_ids=self.positions, attention_mask=self.mask(kind, dtype),
                      use_cache=False)
        read = picked(out.logits, need)
        slot = torch.full((self.nodes,), -1, dtype=torch.long, device=self.ids.device)
        slot[need[0]] = torch.arange(read.shape[0], device=self.ids.device)
        return read[slot[nodes]]


def _walk(input_ids: Any, keep: Any, read: Any) -> Iterator[tuple]:
    """(row, column, node, new, token, depth) for each kept position, rows in order: the one definition of which
    positions share a node (same token under the same parent, before the row's first read position)."""
    children: dict = {}
    count = 0
    for row, (tokens, kept, reads) in enumerate(zip(input_ids.tolist(), keep.tolist(), read.tolist())):
        parent, depth, own = -1, 0, False
        for column, (token, on, is_read) in enumerate(zip(tokens, kept, reads)):
            if not on:
                continue
            own = own or is_read
            node = None if own else children.get((parent, token))
            new = node is None
            if new:
                node, count = count, count + 1
                if not own:
                    children[(parent, token)] = node
            yield row, column, node, new, token, depth
            parent, depth = node, depth + 1


def node_counts(input_ids: Any, keep: Any, read: Any) -> list[int]:
    """The tree's nodes after each row (cumulative): how big a tree the first k rows make."""
    counts = [0] * int(input_ids.shape[0])
    total = 0
    for row, _, _, new, _, _ in _walk(input_ids, keep, read):
        total += new
        counts[row] = total
    for row in range(1, len(counts)):
        counts[row] = max(counts[row], counts[row - 1])
    return counts


def plan(input_ids: Any, keep: Any, read: Any) -> Optional[Plan]:
    """The prefix tree of the kept tokens of each row, or None when it would exceed `MAX_NODES`. From its first
    position in `read` (bool `[rows, width]`: the logits there are read) a row's nodes are its own: a node is
    shared only while no row reads its logits (as the cached prefix shares only unread positions); sharing the
    read ones too gave gradients 10-100× further from the float64 ones on the real base, for a few tokens."""
    import torch

    ids, positions = [], []
    paths: list = [[] for _ in range(int(input_ids.shape[0]))]
    index = torch.full(input_ids.shape, -1, dtype=torch.long)
    for row, column, node, new, token, depth in _walk(input_ids, keep, read):
        if new:
            if node >= MAX_NODES:
                return None
            ids.append(token)
            positions.append(depth)
        index[row, column] = node
        paths[row].append(node)
    device = input_ids.device
    return Plan(torch.tensor([ids], dtype=torch.long, device=device),
                torch.tensor([positions], dtype=torch.long, device=device), index.to(device),
                tuple(tuple(p) for p in paths))
