"""The model, tokenizer, data and reward the CPU runs of verl's trainer use, all built in code.

- A character tokenizer over the ``sort`` alphabet plus what verl's Qwen chat path needs: ``<|im_end|>``
  (``continuous_token.py:require_token_id``) and ``Ċ`` (U+010A). transformers 5's ``AutoTokenizer`` (which
  verl calls) loads a tokenizer next to a Qwen2 ``config.json`` as ``Qwen2Tokenizer`` with its byte-level
  pre-tokenizer, which writes a newline as ``Ċ``; ``QwenContinuousTokenBuilder`` requires ``"\\n"`` to be one
  token (``continuous_token.py:558``).
- A tiny Qwen2, warmed up by SFT on ``sort`` demonstrations so that groups get mixed rewards.
- ``train.parquet`` / ``val.parquet`` in verl's RL format, and ``compute_score``: the exact ``sort`` verifier.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from costaware.experiments import sorting

CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
MIN_SIZE, MAX_SIZE = 2, 4


def build_model(out: Path, *, sft_steps: int = 300, seed: int = 0, hidden_size: int = 64, num_layers: int = 2) -> Path:
    """Save a tokenizer and an SFT-warmed tiny Qwen2 (``hidden_size`` x ``num_layers``, 4 heads) under
    ``out/model``; returns that path."""
    import torch

    from costaware.experiments.policy import sft
    from costaware.experiments.tasks import get_task
    from costaware.tiny import char_tokenizer, tiny_qwen2

    path = out / "model"
    if (path / "config.json").exists():
        return path
    tok = char_tokenizer(sorting.ALPHABET + "\n\u010a", model_max_length=128)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    model = tiny_qwen2(
        tok,
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=4,
        num_kv_heads=2,
        max_position_embeddings=128,
        seed=seed,
    )
    sft(
        model,
        tok,
        get_task("sort"),
        steps=sft_steps,
        batch_size=32,
        lr=3e-3,
        min_size=MIN_SIZE,
        max_size=MAX_SIZE,
        mistake_prob=0.15,
        seed=seed,
    )
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def write_data(out: Path, *, n_train: int = 64, n_val: int = 8, seed: int = 0) -> tuple[Path, Path]:
    """verl RL parquet files of ``sort`` prompts (``data_source='sort'``, the answer in ``reward_model``)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    paths = []
    for split, n in (("train", n_train), ("val", n_val)):
        tasks = sorting.make_tasks(n, min_size=MIN_SIZE, max_size=MAX_SIZE, rng=rng)
        rows = [
            {
                "data_source": "sort",
                "prompt": [{"role": "user", "content": p}],
                "ability": "sort",
                "reward_model": {"style": "rule", "ground_truth": str(a)},
                "extra_info": {"index": i, "split": split},
            }
            for i, (p, a) in enumerate(zip(tasks.prompts, tasks.answers.tolist(), strict=True))
        ]
        path = out / f"{split}.parquet"
        pd.DataFrame(rows).to_parquet(path)
        paths.append(path)
    return paths[0], paths[1]


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **_):  # noqa: ANN001 - verl's signature
    """verl's custom reward function: 1.0 when the response's last segment is the sorted list."""
    return float(sorting.is_correct([solution_str.strip()], np.array([str(ground_truth)]))[0])


if __name__ == "__main__":  # python -m costaware.integrations.verl.cpu.fixture OUT: build once, print the paths
    import sys

    root = Path(sys.argv[1])
    root.mkdir(parents=True, exist_ok=True)
    print(json.dumps({"model": str(build_model(root)), "data": [str(p) for p in write_data(root)]}))
