"""costaware.integrations.trl.batch: pure tensor-dict operations."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl", reason="the 'trl' extra is not installed")

from costaware.integrations.trl.batch import concat_batches, index_rows, loss_mask, trim_padding  # noqa: E402


def _batch():
    return {
        "prompt_ids": torch.tensor([[0, 5, 6], [0, 0, 7], [4, 5, 6]]),
        "prompt_mask": torch.tensor([[0, 1, 1], [0, 0, 1], [1, 1, 1]]),
        "completion_ids": torch.tensor([[8, 9, 0, 0], [8, 0, 0, 0], [8, 9, 9, 0]]),
        "completion_mask": torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]]),
        "advantages": torch.tensor([1.0, -1.0, 0.5]),
        "num_items_in_batch": torch.tensor(6),
        "prompts": ["a", "b", "c"],
    }


def test_index_rows_keeps_scalars_and_indexes_lists():
    out = index_rows(_batch(), torch.tensor([2, 0, 2]), 3)
    assert out["advantages"].tolist() == [0.5, 1.0, 0.5]
    assert out["prompts"] == ["c", "a", "c"] and int(out["num_items_in_batch"]) == 6


def test_trim_padding_drops_only_all_pad_columns():
    out = trim_padding(index_rows(_batch(), torch.tensor([0, 1]), 3))
    assert out["prompt_ids"].tolist() == [[5, 6], [0, 7]]
    assert out["completion_ids"].tolist() == [[8, 9], [8, 0]]
    assert int(loss_mask(out).sum()) == 3  # no real token lost


def test_concat_batches_repads_prompts_left_and_completions_right():
    a = trim_padding(index_rows(_batch(), torch.tensor([1]), 3))  # prompt width 1, completion width 1
    b = _batch()
    out = concat_batches([a, b], pad_token_id=0)
    assert out["prompt_ids"].shape == (4, 3) and out["prompt_mask"][0].tolist() == [0, 0, 1]
    assert out["completion_mask"][0].tolist() == [1, 0, 0, 0]
    assert out["prompts"] == ["b", "a", "b", "c"]
    with pytest.raises(ValueError, match="batches"):
        concat_batches([], pad_token_id=0)
