"""Pure operations on TRL's per-row tensor dicts (one generation batch): index rows, trim padding,
concatenate. No trainer state; tested directly.

>>> import torch
>>> b = {"prompt_mask": torch.tensor([[0, 1], [1, 1]]), "completion_mask": torch.tensor([[1, 0], [1, 0]]),
...      "prompt_ids": torch.tensor([[9, 5], [4, 5]]), "completion_ids": torch.tensor([[7, 0], [8, 0]]),
...      "num_items_in_batch": torch.tensor(2)}
>>> one = trim_padding(index_rows(b, torch.tensor([0]), 2))
>>> one["prompt_ids"].tolist(), one["completion_ids"].tolist(), int(one["num_items_in_batch"])
([[5]], [[7]], 2)
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "COMPLETION_PAD",
    "PROMPT_PAD",
    "MULTIMODAL",
    "index_rows",
    "loss_mask",
    "trim_padding",
    "concat_batches",
]

# Per-row tensors whose second dimension runs over completion tokens (right-padded), with their pad value.
COMPLETION_PAD = {
    "completion_ids": None,  # the tokenizer's pad id
    "completion_mask": 0,
    "tool_mask": 1,
    "old_per_token_logps": 0,
    "ref_per_token_logps": 0,
    "sampling_per_token_logps": 0,
    "importance_sampling_ratio": 1,
}
PROMPT_PAD = {"prompt_ids": None, "prompt_mask": 0}  # left-padded
MULTIMODAL = ("pixel_values", "image_grid_thw", "token_type_ids", "mm_token_type_ids", "num_images")


def index_rows(batch: dict[str, Any], idx: torch.Tensor, n: int) -> dict[str, Any]:
    """Every per-row field (tensor or list with n rows) indexed by ``idx``; scalars kept."""
    out: dict[str, Any] = {}
    for key, v in batch.items():
        if isinstance(v, torch.Tensor) and v.ndim >= 1 and v.shape[0] == n:
            out[key] = v[idx.to(v.device)]
        elif isinstance(v, list) and len(v) == n:
            out[key] = [v[i] for i in idx.tolist()]
        else:  # scalars such as num_items_in_batch
            out[key] = v
    return out


def loss_mask(batch: dict[str, Any]) -> torch.Tensor:
    """The tokens TRL's loss counts: ``completion_mask`` (times ``tool_mask`` when present)."""
    mask = batch["completion_mask"]
    return mask * batch["tool_mask"] if "tool_mask" in batch else mask


def trim_padding(batch: dict[str, Any]) -> dict[str, Any]:
    """Drop the columns that are padding in every row, so that tokens saved are compute saved.

    Prompts are left-padded and completions right-padded, so the dropped columns are a prefix of the
    prompt and a suffix of the completion; RoPE attention depends on relative positions only.
    """
    pm, cm = batch["prompt_mask"], batch["completion_mask"]
    p_cols = torch.nonzero(pm.any(0)).reshape(-1)
    c_cols = torch.nonzero(cm.any(0)).reshape(-1)
    p_start = int(p_cols[0]) if p_cols.numel() else pm.shape[1] - 1
    c_end = int(c_cols[-1]) + 1 if c_cols.numel() else 1
    width_c = cm.shape[1]
    out = dict(batch)
    for key in PROMPT_PAD:
        out[key] = batch[key][:, p_start:]
    for key in COMPLETION_PAD:
        v = batch.get(key)
        if isinstance(v, torch.Tensor) and v.ndim == 2 and v.shape[1] == width_c:
            out[key] = v[:, :c_end]
    return out


def _pad_cat(parts: list[torch.Tensor], left: bool, value: float | None) -> torch.Tensor:
    width = max(p.shape[1] for p in parts)
    pads = [((width - p.shape[1], 0) if left else (0, width - p.shape[1])) for p in parts]
    return torch.cat([torch.nn.functional.pad(p, pad, value=value) for p, pad in zip(parts, pads, strict=True)], 0)


def concat_batches(batches: list[dict[str, Any]], pad_token_id: int) -> dict[str, Any]:
    """Concatenate generation batches row-wise, re-padding prompts on the left, completions on the right."""
    if not batches:
        raise ValueError("batches must hold at least one batch, got an empty list")
    if len(batches) == 1:
        return dict(batches[0])
    out: dict[str, Any] = {}
    for key, v in batches[0].items():
        vals = [b[key] for b in batches]
        ragged = isinstance(v, torch.Tensor) and v.ndim == 2 and len({x.shape[1] for x in vals}) > 1
        if ragged and key in PROMPT_PAD:
            out[key] = _pad_cat(vals, left=True, value=PROMPT_PAD[key] if key != "prompt_ids" else pad_token_id)
        elif ragged and key in COMPLETION_PAD:
            pad = COMPLETION_PAD[key] if key != "completion_ids" else pad_token_id
            out[key] = _pad_cat(vals, left=False, value=pad)
        elif isinstance(v, torch.Tensor) and v.ndim >= 1:
            out[key] = torch.cat(vals, 0)
        elif isinstance(v, list):
            out[key] = [x for val in vals for x in val]
        else:
            out[key] = v
    return out
