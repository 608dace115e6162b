"""Target-model forwards the speculative engines need beyond mlx-lm's plain call.

- `forward_causal`: the normal causal forward (mlx-lm's own layers and masks) that also returns
  the final-norm hidden states and selected layer outputs (MTP head / DFlash drafter features).
- `forward_tree`: ONE forward over a token tree (a chain is a tree): RoPE at P + depth, attention
  over the prefix plus ancestor-or-self, GatedDeltaNet forked from each parent, per-slot GDN state.
- `commit`: keep the accepted root path: pack KV rows in place, restore GDN state of its last slot.
- `forward_device` / `commit_device`: the same with the committed length on the device (`Cursor`),
  for the pipelined speculative cycle (engines/speculative.py): the verify writes its rows at the
  device position into the attention caches' fixed buffers and attends over a host upper bound of
  the columns with the rest masked; the commit picks GDN state by a device slot index and moves
  the position by a device count. Nothing here reads the device, so cycle n+1 can be queued before
  the host has seen cycle n's verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.base import create_attention_mask, create_ssm_mask, scaled_dot_product_attention
from mlx_lm.models.cache import KVCache

from .bundle import ModelBundle
from .gdn import GdnSnapshot, gdn_tree, restore, restore_at
from .kernels import fast_paths
from .kernels.attention import ops_attention, use_ops_attention
from .tree import DeviceTree, TreeLayout


@dataclass
class ForwardOutput:
    hidden: mx.array                                      # (T, H) after the final norm
    layer_outputs: dict[int, mx.array] = field(default_factory=dict)  # layer id -> (T, H) residual stream


@dataclass
class TreeOutput(ForwardOutput):
    offset: int = 0                                       # committed length P before the verify
    snapshots: dict[int, GdnSnapshot] = field(default_factory=dict)   # GDN layer id -> per-slot state


def forward_causal(
    bundle: ModelBundle, tokens: mx.array, cache: list, capture: tuple[int, ...] = ()
) -> ForwardOutput:
    """Causal forward of `tokens` (1-D) appended to `cache`, keeping hidden states."""
    decoder = bundle.decoder
    h = decoder.embed_tokens(tokens[None])
    fa_mask = create_attention_mask(h, cache[decoder.fa_idx])
    ssm_mask = create_ssm_mask(h, cache[decoder.ssm_idx])
    captured: dict[int, mx.array] = {}
    for i, (layer, layer_cache) in enumerate(zip(bundle.layers, cache)):
        h = layer(h, mask=ssm_mask if layer.is_linear else fa_mask, cache=layer_cache)
        if i in capture:
            captured[i] = h[0]
    return ForwardOutput(hidden=decoder.norm(h)[0], layer_outputs=captured)


def _rope_at(rope: nn.Module, x: mx.array, positions: mx.array) -> mx.array:
    """RoPE with one position per token: treat tokens as the batch axis (rope takes (B,) offsets)."""
    return rope(x.transpose(2, 1, 0, 3), offset=positions).transpose(2, 1, 0, 3)


@lru_cache(maxsize=256)
def _is_chain(tree: TreeLayout) -> bool:
    return tree.parents == tuple(range(-1, tree.size - 1))


@lru_cache(maxsize=256)
def _depths(tree: TreeLayout) -> mx.array:
    return mx.array(tree.depths, dtype=mx.int32)


@lru_cache(maxsize=256)
def _visibility(tree: TreeLayout) -> mx.array:
    return mx.array(tree.visibility)


def tree_mask(tree: TreeLayout, prefix: int) -> mx.array | str | None:
    """Attention mask of a verify over `tree` after `prefix` committed rows: every prefix column
    plus ancestor-or-self. A chain is plain causal attention (the fused kernel's "causal" mode)."""
    if fast_paths.enabled and _is_chain(tree):
        return "causal" if tree.size > 1 else None
    return mx.concatenate([mx.ones((tree.size, prefix), dtype=mx.bool_), _visibility(tree)], axis=1)


def attention_tree(attn: nn.Module, x: mx.array, cache, tree: TreeLayout, mask: mx.array | str | None = None) -> mx.array:
    """A Qwen3-Next gated attention layer over `tree`'s slots after the cache's rows (batch 1)."""
    _, T, _ = x.shape
    queries, gate = mx.split(attn.q_proj(x).reshape(1, T, attn.num_attention_heads, -1), 2, axis=-1)
    gate = gate.reshape(1, T, -1)
    keys = attn.k_norm(attn.k_proj(x).reshape(1, T, attn.num_key_value_heads, -1)).transpose(0, 2, 1, 3)
    values = attn.v_proj(x).reshape(1, T, attn.num_key_value_heads, -1).transpose(0, 2, 1, 3)
    queries = attn.q_norm(queries).transpose(0, 2, 1, 3)

    prefix = cache.offset
    if mask is None:
        mask = tree_mask(tree, prefix)
    if fast_paths.enabled and _is_chain(tree):  # positions prefix.. in order: mlx-lm's own rope call
        queries = attn.rope(queries, offset=prefix)
        keys = attn.rope(keys, offset=prefix)
    else:
        positions = _depths(tree) + prefix if fast_paths.enabled else mx.array([prefix + d for d in tree.depths])
        queries = _rope_at(attn.rope, queries, positions)
        keys = _rope_at(attn.rope, keys, positions)
    keys, values = cache.update_and_fetch(keys, values)

    if use_ops_attention(queries):
        out = ops_attention(queries, keys, values, attn.scale, mask)
    else:
        out = scaled_dot_product_attention(queries, keys, values, cache=cache, scale=attn.scale, mask=mask)
    out = out.transpose(0, 2, 1, 3).reshape(1, T, -1)
    return attn.o_proj(out * mx.sigmoid(gate))


def forward_tree(
    bundle: ModelBundle, tokens: mx.array, tree: TreeLayout, cache: list, capture: tuple[int, ...] = ()
) -> TreeOutput:
    """Verify forward over a tree in slot order. Attention caches grow by T rows (all slots) and
    GDN caches are left as they were: call `commit` with the accepted path afterwards."""
    decoder = bundle.decoder
    h = decoder.embed_tokens(tokens[None])
    offset = cache[decoder.fa_idx].offset
    mask = tree_mask(tree, offset)  # once per forward, shared by every attention layer
    captured: dict[int, mx.array] = {}
    snapshots: dict[int, GdnSnapshot] = {}
    for i, (layer, layer_cache) in enumerate(zip(bundle.layers, cache)):
        normed = layer.input_layernorm(h)
        if layer.is_linear:
            r, snapshots[i] = gdn_tree(layer.linear_attn, normed, layer_cache, tree)
        else:
            r = attention_tree(layer.self_attn, normed, layer_cache, tree, mask)
        h = h + r
        h = h + layer.mlp(layer.post_attention_layernorm(h))
        if i in capture:
            captured[i] = h[0]
    return TreeOutput(hidden=decoder.norm(h)[0], layer_outputs=captured, offset=offset, snapshots=snapshots)


def commit(bundle: ModelBundle, cache: list, out: TreeOutput, path: list[int]) -> None:
    """Keep the root path `path` (slot 0 first, increasing slots) of a verified tree."""
    n = len(path)
    contiguous = path == list(range(n))
    rows = None if contiguous else mx.array(path) + out.offset
    for i, (layer, layer_cache) in enumerate(zip(bundle.layers, cache)):
        if layer.is_linear:
            restore(layer_cache, out.snapshots[i], path[-1])
            continue
        if not contiguous:  # pack accepted rows in place: O(accepted)
            start, stop = out.offset, out.offset + n
            layer_cache.keys[..., start:stop, :] = layer_cache.keys[..., rows, :]
            layer_cache.values[..., start:stop, :] = layer_cache.values[..., rows, :]
        layer_cache.offset = out.offset + n


# -- the committed length on the device ---------------------------------------------------------
@dataclass
class Cursor:
    """The committed length of a set of attention caches as the device sees it after every queued
    cycle (`pos`), what the host knows of it after the cycles it has read (`known`), and the widest
    advance of each cycle still in flight: known + their sum bounds pos, and a verify attends over
    that many columns plus its own rows, the columns past pos masked."""

    pos: mx.array
    known: int
    inflight: list[int] = field(default_factory=list)

    @classmethod
    def at(cls, length: int) -> "Cursor":
        return cls(mx.array(length, dtype=mx.int32), length)

    @property
    def bound(self) -> int:
        return self.known + sum(self.inflight)

    def advance(self, count: mx.array, widest: int) -> None:
        self.pos = self.pos + count.astype(mx.int32)
        self.inflight.append(widest)

    def landed(self, count: int) -> None:
        """The oldest cycle in flight has been read: it advanced by `count`."""
        self.known += count
        self.inflight.pop(0)


def ensure_capacity(cache, width: int) -> None:
    """Grow an attention cache's buffers to hold `width` rows (in mlx-lm's steps), keeping every row
    (rows past the host's offset may belong to a cycle in flight)."""
    if cache.keys.shape[2] >= width:
        return
    step = cache.step
    extra = ((width - cache.keys.shape[2] + step - 1) // step) * step
    B, H, _, Dk = cache.keys.shape
    cache.keys = mx.concatenate([cache.keys, mx.zeros((B, H, extra, Dk), cache.keys.dtype)], axis=2)
    cache.values = mx.concatenate([cache.values, mx.zeros((B, H, extra, cache.values.shape[3]), cache.values.dtype)], axis=2)


def write_rows(cache, keys: mx.array, values: mx.array, rows: mx.array) -> None:
    """keys/values (1, H, T, D) into buffer rows `rows` (T,) (device indices): one scatter each
    (put_along_axis: 3 graph nodes where indexed assignment builds 18)."""
    index = rows[None, None, :, None]
    cache.keys = mx.put_along_axis(cache.keys, mx.broadcast_to(index, keys.shape), keys, axis=2)
    cache.values = mx.put_along_axis(cache.values, mx.broadcast_to(index, values.shape), values, axis=2)


def _rows(pos: mx.array, size: int) -> mx.array:
    return pos + mx.arange(size, dtype=mx.int32)


def device_mask(tree: DeviceTree, pos: mx.array, width: int) -> mx.array:
    """(T, width) bool: committed columns (< pos) plus ancestor-or-self among the tree's rows,
    which sit at columns pos.. of the buffer."""
    column = mx.arange(width, dtype=mx.int32)[None, :] - pos
    if tree.layout is not None and _is_chain(tree.layout):
        return column <= mx.arange(tree.size, dtype=mx.int32)[:, None]
    inside = (column >= 0) & (column < tree.size)
    ancestors = mx.take(tree.visibility, mx.clip(column[0], 0, tree.size - 1), axis=1)
    return (column < 0) | (inside & ancestors)


def attention_device(attn: nn.Module, x: mx.array, cache, tree: DeviceTree, pos: mx.array, width: int,
                     mask: mx.array, rows: mx.array | None = None) -> tuple[mx.array, tuple[mx.array, mx.array]]:
    """`attention_tree` at a device position: the tree's rows are written at pos..pos+T of the
    buffer (`rows`, once per forward); returns the output and the rows (a tree commit packs the
    accepted ones)."""
    _, T, _ = x.shape
    queries, gate = mx.split(attn.q_proj(x).reshape(1, T, attn.num_attention_heads, -1), 2, axis=-1)
    gate = gate.reshape(1, T, -1)
    keys = attn.k_norm(attn.k_proj(x).reshape(1, T, attn.num_key_value_heads, -1)).transpose(0, 2, 1, 3)
    values = attn.v_proj(x).reshape(1, T, attn.num_key_value_heads, -1).transpose(0, 2, 1, 3)
    queries = attn.q_norm(queries).transpose(0, 2, 1, 3)
    if tree.layout is not None and _is_chain(tree.layout):
        queries, keys = attn.rope(queries, offset=pos), attn.rope(keys, offset=pos)
    else:
        positions = tree.depths + pos
        queries, keys = _rope_at(attn.rope, queries, positions), _rope_at(attn.rope, keys, positions)
    ensure_capacity(cache, width)
    write_rows(cache, keys, values, _rows(pos, T) if rows is None else rows)
    all_keys, all_values = cache.keys[..., :width, :], cache.values[..., :width, :]
    if use_ops_attention(queries):
        out = ops_attention(queries, all_keys, all_values, attn.scale, mask)
    else:
        out = scaled_dot_product_attention(queries, all_keys, all_values, cache=cache, scale=attn.scale, mask=mask)
    out = out.transpose(0, 2, 1, 3).reshape(1, T, -1)
    return attn.o_proj(out * mx.sigmoid(gate)), (keys, values)


@dataclass
class DeviceOutput(ForwardOutput):
    pos: mx.array | None = None                                          # committed length before the verify
    snapshots: dict[int, GdnSnapshot] = field(default_factory=dict)      # GDN layer id -> per-slot state
    rows: dict[int, tuple[mx.array, mx.array]] = field(default_factory=dict)   # attention layer -> new K/V
    buffer_rows: mx.array | None = None                                  # (T,) where the verify wrote them


def forward_device(bundle: ModelBundle, tokens: mx.array, tree: DeviceTree, cache: list, cursor: Cursor,
                   capture: tuple[int, ...] = ()) -> DeviceOutput:
    """`forward_tree` at the cursor's device position; call `commit_device` afterwards."""
    decoder = bundle.decoder
    h = decoder.embed_tokens(tokens[None])
    width = cursor.bound + tree.size
    mask = device_mask(tree, cursor.pos, width)   # once per forward, shared by every attention layer
    rows = _rows(cursor.pos, tree.size)
    out = DeviceOutput(hidden=h, pos=cursor.pos, buffer_rows=rows)
    for i, (layer, layer_cache) in enumerate(zip(bundle.layers, cache)):
        normed = layer.input_layernorm(h)
        if layer.is_linear:
            r, out.snapshots[i] = gdn_tree(layer.linear_attn, normed, layer_cache, tree)
        else:
            r, out.rows[i] = attention_device(layer.self_attn, normed, layer_cache, tree, cursor.pos, width, mask, rows)
        h = h + r
        h = h + layer.mlp(layer.post_attention_layernorm(h))
        if i in capture:
            out.layer_outputs[i] = h[0]
    out.hidden = decoder.norm(h)[0]
    return out


def commit_device(bundle: ModelBundle, cache: list, out: DeviceOutput, tree: DeviceTree, path: mx.array,
                  last: mx.array, count: mx.array, cursor: Cursor) -> None:
    """Keep the accepted root path (`path`: its slots in depth order, then filler; `last` its final
    slot; `count` its length) without a host read: GDN state at `last`, accepted K/V rows packed
    at pos (a chain's are already there), the cursor moved by count."""
    chain = tree.layout is not None and _is_chain(tree.layout)
    for i, (layer, layer_cache) in enumerate(zip(bundle.layers, cache)):
        if layer.is_linear:
            restore_at(layer_cache, out.snapshots[i], last)
        elif not chain:
            keys, values = out.rows[i]
            write_rows(layer_cache, keys[:, :, path], values[:, :, path], out.buffer_rows)
    cursor.advance(count, tree.size)


def settle(cache: list, cursor: Cursor) -> None:
    """Hand the caches back to host-offset code (mlx-lm's decode, the host cycle): nothing in
    flight, the attention caches' offsets set to the committed length."""
    for layer_cache in cache:
        if isinstance(layer_cache, KVCache):
            layer_cache.offset = cursor.known
