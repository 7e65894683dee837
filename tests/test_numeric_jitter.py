"""The numeric-perturbation check: a seeded, ulp-sized change to the SFT weights, the same for every arm of a seed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from costaware.experiments.grpo_run import jitter
from costaware.experiments.keys import run_file
from costaware.experiments.profile import PROFILES, Profile
from costaware.experiments.specs import RunSpec
from costaware.tiny import char_tokenizer, tiny_qwen2


def _model():
    return tiny_qwen2(char_tokenizer(), hidden_size=16, num_layers=1, seed=0)


def test_jitter_is_seeded_relative_and_keeps_tied_weights_tied():
    a, b, c, base = _model(), _model(), _model(), _model()
    jitter(a, 1e-6, seed=3)
    jitter(b, 1e-6, seed=3)
    jitter(c, 1e-6, seed=4)
    pa, pb, pc, p0 = (dict(m.named_parameters()) for m in (a, b, c, base))
    assert all(torch.equal(pa[k], pb[k]) for k in pa)  # one seed, one perturbation: every arm of a seed shares it
    assert any(not torch.equal(pa[k], pc[k]) for k in pa)
    rel = max(float(((pa[k] - p0[k]).abs() / p0[k].abs().clamp_min(1e-30)).max()) for k in pa)
    assert 0 < rel < 1e-5
    if a.config.tie_word_embeddings:
        assert a.get_output_embeddings().weight.data_ptr() == a.get_input_embeddings().weight.data_ptr()


def test_jitter_is_keyed_only_when_on_and_checked():
    spec = RunSpec("headline", "p_star", 0, task="sort")
    p = PROFILES["settle"]
    on = Profile(**{**p.__dict__, "numeric_jitter": 1e-6})
    assert run_file(Path("o"), spec, p) != run_file(Path("o"), spec, on)
    with pytest.raises(ValueError, match="numeric_jitter must be a number in"):
        Profile(numeric_jitter=-1.0)
