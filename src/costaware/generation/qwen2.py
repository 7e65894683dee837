"""A pure-torch Qwen2 decoder over a preallocated KV cache, reading the weights of a transformers model.

:func:`qwen2_weights` takes the current parameters of a ``Qwen2ForCausalLM``, fused into a few
matrices (q/k/v with their rotated copies, gate/up, the norms' weights folded in) on every call, so
that weights an optimiser has just updated are the ones sampled from, and checks that the
configuration is one this forward reproduces: full causal attention (no
sliding window), a rotary embedding whose frequencies do not depend on the sequence length (any
``rope_type`` but ``dynamic`` and ``longrope``; its table is computed by the model's own rotary module, so
``rope_theta`` and the scaling types are the model's), grouped-query attention with the q/k/v biases
Qwen2 has, an RMSNorm before attention and before the MLP, the gated MLP, tied or untied ``lm_head``.

:func:`forward` runs ``S`` new tokens of ``B`` rows through the decoder, writes their keys and values
into the cache at slots ``start .. start+S`` and returns the last position's logits. Rows are
left-padded: a bias of -inf (:func:`key_bias`) keeps queries off the padding slots, and each row's positions count its
real tokens only (what ``generate`` derives from the attention mask), so a padded row computes what it
would compute alone. Every product is one 2-D matrix product over all rows and new tokens, or one
batched product per (row, kv head) in attention; the cache is never repeated for the query heads.

>>> from costaware.tiny import char_tokenizer, tiny_qwen2
>>> model = tiny_qwen2(char_tokenizer("ab"), hidden_size=16, num_layers=1).eval()
>>> w = qwen2_weights(model, max_positions=8)
>>> cache = KVCache.empty(w, rows=1, slots=8)
>>> ids = torch.tensor([[4, 5]])
>>> bias = key_bias(torch.ones(1, 8, dtype=torch.bool), torch.float32)
>>> logits = forward(w, ids, torch.arange(2)[None], cache, start=0, bias=bias)
>>> torch.allclose(logits, model(ids).logits[:, -1], atol=1e-5)
True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from costaware._checks import integer

__all__ = ["KVCache", "LayerWeights", "Qwen2Weights", "check_model", "forward", "key_bias", "qwen2_weights"]

# rotary types whose inverse frequencies change with the sequence length: a fixed table would be wrong
_LENGTH_DEPENDENT_ROPE = ("dynamic", "longrope")


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer's parameters, fused for few, large matrix products; the weight of the RMSNorm
    before each product scales that product's columns (``w * (x r) @ W.T == (x r) @ (W w).T``).

    ``qkv_weight`` holds, as output rows, q (times ``head_dim ** -0.5`` when that is a power of two, an
    exact scaling), k, v, then q and k with
    each head's halves swapped and the first negated: ``rotate_half`` of a linear map is that map with
    permuted, negated rows, so one product yields both terms of the rotary embedding.
    """

    qkv_weight: torch.Tensor  # ((2 heads + 3 kv_heads) x head_dim, H)
    qkv_bias: torch.Tensor  # ((2 heads + 3 kv_heads) x head_dim,)
    o_weight: torch.Tensor  # (H, heads x head_dim)
    gate_up_weight: torch.Tensor  # (2 I, H)
    down_weight: torch.Tensor  # (H, I)
    act: Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Qwen2Weights:
    """A Qwen2 causal LM's parameters and shapes, with its rotary table for positions ``0 .. max_positions-1``."""

    embed: torch.Tensor  # (V, H)
    layers: tuple[LayerWeights, ...]
    lm_head: torch.Tensor  # (V, H): the embedding itself when tied, times the final norm's weight
    eps: float
    heads: int
    kv_heads: int
    head_dim: int
    rotary: torch.Tensor  # (max_positions, 2 head_dim): cos, then sin
    score_scale: float  # what multiplies q.k after the product: 1 when the scale is folded into q


@dataclass
class KVCache:
    """Keys and values of every layer: ``kv[0]`` keys, ``kv[1]`` values, each (layers, B, kv_heads, slots, head_dim)."""

    kv: torch.Tensor

    @classmethod
    def empty(cls, w: Qwen2Weights, *, rows: int, slots: int) -> KVCache:
        shape = (2, len(w.layers), rows, w.kv_heads, slots, w.head_dim)
        return cls(torch.empty(shape, dtype=w.embed.dtype, device=w.embed.device))

    def keep(self, rows: torch.Tensor) -> None:
        """Drop every row not in ``rows`` (indices): one copy of the cache."""
        self.kv = self.kv.index_select(2, rows)


def check_model(model: Any) -> Any:
    """``model``'s config, or a ValueError saying what this forward would not reproduce exactly."""
    from transformers import Qwen2ForCausalLM

    if not isinstance(model, Qwen2ForCausalLM):
        raise ValueError(f"model must be a transformers Qwen2ForCausalLM, got {type(model).__name__}")
    cfg = model.config
    sliding = [t for t in (getattr(cfg, "layer_types", None) or ()) if t != "full_attention"]
    if getattr(cfg, "use_sliding_window", False) or sliding:
        raise ValueError(
            f"model.config: sliding-window attention is not supported (use_sliding_window="
            f"{getattr(cfg, 'use_sliding_window', None)!r}, layer_types with {sorted(set(sliding))})"
        )
    rope_type = getattr(model.model.rotary_emb, "rope_type", "default")
    if rope_type in _LENGTH_DEPENDENT_ROPE:
        raise ValueError(
            f"model.config: rope_type={rope_type!r} changes the rotary frequencies with the sequence "
            f"length; supported are the fixed-frequency types (not {_LENGTH_DEPENDENT_ROPE})"
        )
    if model.training and bool(getattr(cfg, "attention_dropout", 0.0)):
        raise ValueError(
            f"model.config.attention_dropout={cfg.attention_dropout!r} with the model in training "
            "mode: this forward has no dropout; call model.eval() or set attention_dropout=0"
        )
    return cfg


def _folded_scale(head_dim: int) -> float:
    """The attention scale ``head_dim ** -0.5`` when it is a power of two (then scaling q is exact), else 1."""
    scale = head_dim**-0.5
    return scale if math.frexp(scale)[0] == 0.5 else 1.0


def _swap_halves(t: torch.Tensor, heads: int, head_dim: int) -> torch.Tensor:
    """Rows (or entries) of a projection turned into those of ``rotate_half`` of its output, head by head."""
    h = t.reshape(heads, 2, head_dim // 2, *t.shape[1:])
    return torch.cat([-h[:, 1:], h[:, :1]], dim=1).reshape(t.shape)


@torch.no_grad()
def qwen2_weights(model: Any, *, max_positions: int) -> Qwen2Weights:
    """The current weights of ``model`` (a ``Qwen2ForCausalLM``), checked, with a rotary table of ``max_positions``."""
    cfg = check_model(model)
    max_positions = integer(max_positions, "max_positions", minimum=1, strict=True)
    body = model.model
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    layers = []
    for layer in body.layers[: cfg.num_hidden_layers]:
        at, mlp = layer.self_attn, layer.mlp
        if at.o_proj.bias is not None or mlp.gate_proj.bias is not None:  # Qwen2 has none; refuse a variant
            raise ValueError("model: o_proj and the MLP must have no bias, as in Qwen2")
        d = at.o_proj.weight.shape[1] // heads
        scale = _folded_scale(d)
        wq, bq = at.q_proj.weight * scale, at.q_proj.bias * scale
        weight = torch.cat([wq, at.k_proj.weight, at.v_proj.weight, _swap_halves(wq, heads, d),
                            _swap_halves(at.k_proj.weight, kv_heads, d)])  # fmt: skip
        bias = torch.cat([bq, at.k_proj.bias, at.v_proj.bias, _swap_halves(bq, heads, d),
                          _swap_halves(at.k_proj.bias, kv_heads, d)])  # fmt: skip
        gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
        layers.append(LayerWeights(  # each RMSNorm's weight scales the columns of the product it feeds
            qkv_weight=(weight * layer.input_layernorm.weight).detach(), qkv_bias=bias.detach(),
            o_weight=at.o_proj.weight.detach(),
            gate_up_weight=(gate_up * layer.post_attention_layernorm.weight).detach(),
            down_weight=mlp.down_proj.weight.detach(), act=mlp.act_fn,
        ))  # fmt: skip
    embed = body.embed_tokens.weight.detach()
    head_dim = layers[0].o_weight.shape[1] // heads if layers else 1
    # the model's own rotary module computes the table, so its rope_theta and scaling type apply
    positions = torch.arange(max_positions, device=embed.device)[None]
    cos, sin = body.rotary_emb(embed[:1][None], positions)
    return Qwen2Weights(
        embed=embed, layers=tuple(layers), lm_head=(model.lm_head.weight * body.norm.weight).detach(),
        eps=float(body.norm.variance_epsilon), heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        rotary=torch.cat([cos[0], sin[0]], dim=-1).to(embed.dtype),
        score_scale=head_dim**-0.5 / _folded_scale(head_dim),
    )  # fmt: skip


def _rms_normed(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``x`` over its root mean square, as Qwen2RMSNorm computes it (in float32), without the weight."""
    if x.dtype == torch.float32:
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), None, eps)
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def key_bias(key_valid: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, 1, 1, slots): 0 on the slots that hold real tokens, -inf on padding."""
    return torch.zeros(key_valid.shape, dtype=dtype, device=key_valid.device).masked_fill_(~key_valid, float("-inf"))[
        :, None, None
    ]


def forward(
    w: Qwen2Weights,
    ids: torch.Tensor,
    positions: torch.Tensor,
    cache: KVCache,
    *,
    start: int,
    bias: torch.Tensor,
) -> torch.Tensor:
    """Logits (B, V) of the last of ``S`` new tokens ``ids`` (B, S) at rotary ``positions`` (B, S).

    Their keys and values go to cache slots ``start .. start+S``. A query attends to the slots up to
    its own, with ``bias`` (B, 1, 1, slots) from :func:`key_bias` (-inf on padding), and always to
    itself, so that a padding query has a finite output (nothing reads it).
    """
    rows, new = ids.shape
    end = start + new
    g, d = w.heads // w.kv_heads, w.head_dim
    q_width, kv_width = w.heads * d, w.kv_heads * d
    qk_heads = w.heads + w.kv_heads
    x = w.embed[ids.reshape(-1)]  # (B S, H): every product below is one 2-D matrix product
    cos, sin = w.rotary[positions.reshape(-1)][:, None].split(d, dim=-1)  # (B S, 1, D) each
    att_bias = bias[..., :end]
    if new > 1:  # causal within the new tokens; the diagonal always open
        slot = torch.arange(end, device=ids.device)
        query = torch.arange(start, end, device=ids.device)[:, None]
        causal = torch.zeros(new, end, dtype=x.dtype, device=x.device).masked_fill_(slot > query, float("-inf"))
        att_bias = (att_bias + causal).masked_fill_(slot == query, 0.0)  # (B, 1, S, end)
    # (B kv_heads, g S, end): the g query heads of a kv head share its keys, never repeated
    att_bias = att_bias[:, :, None].expand(rows, w.kv_heads, g, new, end).reshape(rows * w.kv_heads, g * new, end)
    for i, layer in enumerate(w.layers):
        proj = torch.nn.functional.linear(_rms_normed(x, w.eps), layer.qkv_weight, layer.qkv_bias)
        plain, v, swapped = proj.split((q_width + kv_width, kv_width, q_width + kv_width), dim=-1)
        qk = torch.addcmul(plain.view(-1, qk_heads, d) * cos, swapped.view(-1, qk_heads, d), sin)
        qk = qk.view(rows, new, qk_heads, d).transpose(1, 2)  # (B, heads + kv_heads, S, D)
        keys, values = cache.kv[0, i], cache.kv[1, i]  # (B, kv_heads, slots, D)
        keys[:, :, start:end] = qk[:, w.heads :]
        values[:, :, start:end] = v.view(rows, new, w.kv_heads, d).transpose(1, 2)
        keys = keys.view(rows * w.kv_heads, -1, d)[:, :end]
        values = values.view(rows * w.kv_heads, -1, d)[:, :end]
        q = qk[:, : w.heads].reshape(rows * w.kv_heads, g * new, d)
        scores = torch.baddbmm(att_bias, q, keys.transpose(1, 2), alpha=w.score_scale)
        probs = (
            torch.softmax(scores, dim=-1) if x.dtype == torch.float32 else scores.softmax(-1, torch.float32).to(x.dtype)
        )
        att = torch.bmm(probs, values).view(rows, w.heads, new, d)
        x = torch.addmm(x, att.transpose(1, 2).reshape(rows * new, q_width), layer.o_weight.t())
        gate, up = torch.nn.functional.linear(_rms_normed(x, w.eps), layer.gate_up_weight).chunk(2, dim=-1)
        x = torch.addmm(x, layer.act(gate) * up, layer.down_weight.t())
    return torch.nn.functional.linear(_rms_normed(x.view(rows, new, -1)[:, -1], w.eps), w.lm_head)
