"""The KV sampler (costaware.generation) against the transformers model it reads: logits, law, format, errors."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from scipy import stats  # noqa: E402
from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: E402
from transformers.generation.logits_process import (  # noqa: E402
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from costaware.generation import SamplingParams, kv_generate, process_logits  # noqa: E402

VOCAB, PAD, EOS = 16, 0, 2

# (heads, kv_heads, tied, rope): GQA tied as the main job's policy; GQA 4:1 untied with a linear-scaled
# rope of another theta; plain multi-head attention, untied
CONFIGS = {
    "gqa-tied": dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
    "gqa4to1-untied-rope": dict(num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=False,
                                rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 100.0}),
    "mha-untied": dict(num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False),
}  # fmt: skip


def make_model(name: str = "gqa-tied", *, seed: int = 0, logit_scale: float = 1.0) -> Qwen2ForCausalLM:
    """A random float32 Qwen2 with every parameter (biases and norm weights too) away from its init."""
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      max_position_embeddings=64, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=1,
                      **CONFIGS[name])  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(cfg).eval()
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.data = 1 + 0.3 * torch.randn_like(p)
            else:
                p.data = 0.3 * torch.randn_like(p)
        if logit_scale != 1.0:
            model.model.norm.weight.data *= logit_scale
    return model


PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [4], [7, 8, 9], [12, 13], [5, 6, 7, 8, 9, 10, 11], [3, 3, 4, 5, 6]] * 4


def reference_logits(model, prefix: list[int]) -> torch.Tensor:
    """The model's own forward, no cache, no padding, on one prefix: the last position's logits."""
    with torch.no_grad():
        return model(torch.tensor([prefix])).logits[0, -1]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_steps_logits_equal_the_models_full_forward_on_the_prefix(name):
    model = make_model(name)
    seen: list[tuple[int, list[int], torch.Tensor]] = []
    out = kv_generate(model, PROMPTS, max_new_tokens=10, eos_token_ids=[EOS, 3], pad_token_id=PAD,
                      generator=torch.Generator().manual_seed(1),
                      logits_hook=lambda step, rows, logits: seen.append(
                          (step, rows.tolist(), logits.clone())))  # fmt: skip
    assert len({len(rows) for _, rows, _ in seen}) > 2  # rows finished and left the batch on the way
    worst = scale = 0.0
    for step, rows, logits in seen:
        assert logits.dtype == torch.float32 and logits.shape == (len(rows), VOCAB)
        for r, got in zip(rows, logits, strict=True):
            assert len(out.completions[r]) > step  # a row is stepped only while it runs
            ref = reference_logits(model, PROMPTS[r] + out.completions[r][:step])
            worst = max(worst, float((got - ref).abs().max()))
            scale = max(scale, float(ref.abs().max()))
    # float32 round-off relative to the logits' size (the cache sums in another order than the full
    # forward; BLAS kernels differ between CPUs); a wrong cache, mask or position is off by O(scale)
    assert worst < 1e-5 * max(scale, 1.0), (worst, scale)


def test_greedy_output_is_generates_output_token_for_token():
    model = make_model("gqa-tied")
    width = max(map(len, PROMPTS))
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in PROMPTS])
    mask = (torch.arange(width) >= width - torch.tensor([len(p) for p in PROMPTS])[:, None]).long()
    ref = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=9, do_sample=False, pad_token_id=PAD,
                         eos_token_id=[EOS, 3])  # fmt: skip
    out = kv_generate(model, PROMPTS, max_new_tokens=9, eos_token_ids=[EOS, 3], pad_token_id=PAD,
                      params=SamplingParams(temperature=0))  # fmt: skip
    assert out.prompt_width == width
    assert out.sequences.shape == ref.shape and torch.equal(out.sequences, ref)
    assert any(len(c) < 9 for c in out.completions) and any(len(c) == 9 for c in out.completions)


def test_output_format_eos_stop_and_length_cap():
    model = make_model("mha-untied")
    out = kv_generate(model, PROMPTS, max_new_tokens=6, eos_token_ids=[EOS, 3], pad_token_id=PAD,
                      generator=torch.Generator().manual_seed(3))  # fmt: skip
    width = max(map(len, PROMPTS))
    assert out.sequences.dtype == torch.long and out.sequences.shape[0] == len(PROMPTS)
    steps = out.sequences.shape[1] - width
    assert steps == max(map(len, out.completions)) <= 6
    for p, c, row in zip(PROMPTS, out.completions, out.sequences.tolist(), strict=True):
        assert row[:width] == [PAD] * (width - len(p)) + p  # left-padded prompt
        assert row[width:] == c + [PAD] * (steps - len(c))  # the completion, then padding
        stops = [i for i, t in enumerate(c) if t in (EOS, 3)]
        assert stops in ([], [len(c) - 1])  # an EOS ends the row and is kept; nothing follows it
        assert stops or len(c) == 6  # no EOS: the length cap
    assert any(len(c) < 6 for c in out.completions) and any(len(c) == 6 for c in out.completions)


def test_same_seed_same_tokens_and_the_weights_are_read_on_every_call():
    model = make_model("gqa-tied")

    def run(seed):
        return kv_generate(model, PROMPTS, max_new_tokens=8, eos_token_ids=EOS, pad_token_id=PAD,
                           generator=torch.Generator().manual_seed(seed)).completions  # fmt: skip

    assert run(5) == run(5) != run(6)
    with torch.no_grad():  # an optimiser step: the next call samples from the new weights
        model.model.layers[0].self_attn.q_proj.weight.add_(0.5)
        model.lm_head.weight.mul_(1.5)
    seen = []
    kv_generate(model, PROMPTS[:3], max_new_tokens=1, eos_token_ids=EOS, pad_token_id=PAD,
                logits_hook=lambda s, r, lg: seen.append(lg))  # fmt: skip
    for r, got in enumerate(seen[0]):
        assert torch.allclose(got, reference_logits(model, PROMPTS[r]), atol=1e-5)


@pytest.mark.parametrize(
    "params",
    [SamplingParams(), SamplingParams(temperature=0.7), SamplingParams(top_k=3), SamplingParams(top_p=0.6),
     SamplingParams(temperature=1.3, top_k=5, top_p=0.9), SamplingParams(temperature=0.5, top_k=40, top_p=0.999),
     SamplingParams(top_p=0.75)],
)  # fmt: skip
def test_process_logits_is_transformers_warpers(params):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(64, VOCAB, generator=gen) * 3
    logits[0, :4] = 1.0  # ties at the top-k and top-p boundaries
    logits[1] = -1e9
    logits[1, :4] = 0.0  # probabilities 0.25 x 4, exactly: the top-p cut falls on a cumulative sum (<=, not <)
    warpers = LogitsProcessorList()
    if params.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(params.temperature))
    if params.top_k:
        warpers.append(TopKLogitsWarper(params.top_k))
    if params.top_p < 1.0:
        warpers.append(TopPLogitsWarper(params.top_p))
    assert torch.equal(process_logits(logits, params), warpers(None, logits.clone()))
    if params == SamplingParams(top_p=0.75):
        assert int(torch.isfinite(process_logits(logits, params)[1]).sum()) == 3


# -- the law of the sampled tokens ----------------------------------------------------------------------------
N_DRAWS = 40_000
PREFIX = [5, 9, 4, 11]


def chi2_pvalue(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's chi-square test of ``counts`` against ``probs``; bins expecting < 5 draws are pooled.
    A draw in a bin of probability 0 is an outright rejection (p = 0)."""
    expected = probs.double() * counts.sum()
    if counts[probs == 0].sum() > 0:
        return 0.0
    big = expected >= 5
    obs = torch.cat([counts[big].double(), counts[~big].double().sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    keep = exp > 0
    return float(
        stats.chisquare(obs[keep].numpy(), exp[keep].numpy() * obs[keep].sum().item() / exp[keep].sum().item()).pvalue
    )


def law(model, params: SamplingParams, prefixes: list[list[int]]) -> torch.Tensor:
    """(len(prefixes), V): softmax of the warped reference logits, i.e. what generate samples from."""
    logits = torch.stack([reference_logits(model, p) for p in prefixes])
    return torch.softmax(process_logits(logits, params), dim=-1)


def joint_law(model, params: SamplingParams) -> torch.Tensor:
    """(V, V + 1): P(t1, t2) of two steps from PREFIX; column V is 'stopped after t1 = EOS'."""
    first = law(model, params, [PREFIX])[0]
    second = law(model, params, [PREFIX + [t] for t in range(VOCAB)])
    joint = torch.cat([first[:, None] * second, torch.zeros(VOCAB, 1)], dim=1)
    joint[EOS] = 0.0
    joint[EOS, VOCAB] = first[EOS]
    return joint


def two_step_counts(model, params: SamplingParams, seed: int) -> torch.Tensor:
    out = kv_generate(model, [PREFIX] * N_DRAWS, max_new_tokens=2, eos_token_ids=EOS, pad_token_id=PAD,
                      params=params, generator=torch.Generator().manual_seed(seed))  # fmt: skip
    seq = out.sequences[:, len(PREFIX) :]
    second = torch.where(seq[:, 0] == EOS, VOCAB, seq[:, 1])
    return torch.bincount(seq[:, 0] * (VOCAB + 1) + second, minlength=VOCAB * (VOCAB + 1))


LAW_CASES = [SamplingParams(), SamplingParams(temperature=0.7, top_k=6), SamplingParams(temperature=1.2, top_p=0.85)]


@pytest.mark.parametrize("params", LAW_CASES, ids=["t1", "t0.7-k6", "t1.2-p0.85"])
def test_next_token_law_passes_chi_square_and_a_10pct_wrong_temperature_fails_it(params):
    model = make_model("gqa4to1-untied-rope", logit_scale=1.5)  # peaked: a temperature change shows
    probs = law(model, params, [PREFIX])[0]
    assert probs.max() < 0.8 and (probs > 0.01).sum() >= 5  # the test has bins to look at

    def pvalue(sampler_params: SamplingParams, seed: int) -> float:
        out = kv_generate(model, [PREFIX] * N_DRAWS, max_new_tokens=1, eos_token_ids=EOS, pad_token_id=PAD,
                          params=sampler_params, generator=torch.Generator().manual_seed(seed))  # fmt: skip
        return chi2_pvalue(torch.bincount(out.sequences[:, -1], minlength=VOCAB), probs)

    assert pvalue(params, seed=11) > 1e-3
    wrong = SamplingParams(temperature=params.temperature * 1.1, top_k=params.top_k, top_p=params.top_p)
    assert pvalue(wrong, seed=11) < 1e-6  # the same statistic sees a 10% temperature error


@pytest.mark.parametrize("params", LAW_CASES[:2], ids=["t1", "t0.7-k6"])
def test_two_step_sequence_law_passes_chi_square_and_a_wrong_temperature_fails_it(params):
    model = make_model("gqa-tied", logit_scale=0.5)
    joint = joint_law(model, params).reshape(-1)
    assert stats.entropy(joint.numpy()) > 1.5  # many sequences carry mass
    assert chi2_pvalue(two_step_counts(model, params, seed=21), joint) > 1e-3
    wrong = SamplingParams(temperature=params.temperature * 1.1, top_k=params.top_k, top_p=params.top_p)
    assert chi2_pvalue(two_step_counts(model, wrong, seed=21), joint) < 1e-6


# -- what it refuses ------------------------------------------------------------------------------------------
def test_unsupported_options_and_models_are_refused_by_name():
    with pytest.raises(ValueError, match="min_p"):
        SamplingParams(min_p=0.05)
    with pytest.raises(ValueError, match="repetition_penalty"):
        SamplingParams(repetition_penalty=1.1)
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1.0)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="top_k"):
        SamplingParams(top_k=-2)
    model = make_model()
    kw = dict(eos_token_ids=EOS, pad_token_id=PAD)
    with pytest.raises(ValueError, match="max_new_tokens"):
        kv_generate(model, PROMPTS, max_new_tokens=0, **kw)
    with pytest.raises(ValueError, match="prompts"):
        kv_generate(model, [[4], []], max_new_tokens=2, **kw)
    with pytest.raises(ValueError, match="vocabulary"):
        kv_generate(model, [[4, VOCAB]], max_new_tokens=2, **kw)
    with pytest.raises(ValueError, match="eos_token_ids"):
        kv_generate(model, PROMPTS, max_new_tokens=2, eos_token_ids=[], pad_token_id=PAD)
    from transformers import LlamaConfig, LlamaForCausalLM

    llama = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))  # fmt: skip
    with pytest.raises(ValueError, match="model must be a transformers Qwen2ForCausalLM, got LlamaForCausalLM"):
        kv_generate(llama, PROMPTS, max_new_tokens=2, **kw)
    base = make_model().config.to_dict()
    sliding = Qwen2ForCausalLM(Qwen2Config(**{**base, "use_sliding_window": True, "sliding_window": 4,
                                              "max_window_layers": 0, "layer_types": None}))  # fmt: skip
    with pytest.raises(ValueError, match="sliding-window"):
        kv_generate(sliding, PROMPTS, max_new_tokens=2, **kw)
    dynamic = Qwen2ForCausalLM(Qwen2Config(**{**base, "rope_parameters": {"rope_type": "dynamic", "factor": 2.0,
                                                                           "rope_theta": 10000.0}}))  # fmt: skip
    with pytest.raises(ValueError, match="rope_type='dynamic'"):
        kv_generate(dynamic, PROMPTS, max_new_tokens=2, **kw)


def test_the_main_jobs_sampling_with_kv_is_generate_when_greedy_and_reproducible_when_sampled():
    from costaware.experiments import policy
    from costaware.experiments.tasks import get_task

    task = get_task("sort")
    tok, model = policy.build_policy(task.alphabet, hidden_size=32, num_layers=2, seed=0)
    with torch.no_grad():  # an EOS within reach: responses of several lengths
        model.lm_head.weight[tok.eos_token_id] += 2 * model.model.embed_tokens.weight.std()
    prompts = task.make_tasks(12, min_size=2, max_size=5).prompts
    kw = dict(k=2, max_new_tokens=12, seed=3)
    greedy = policy.sample(model, tok, prompts, temperature=0, generation="kv", **kw)
    assert greedy == policy.sample(model, tok, prompts, temperature=0, generation="transformers", **kw)
    sampled = policy.sample(model, tok, prompts, generation="kv", **kw)
    assert sampled == policy.sample(model, tok, prompts, generation="kv", batch_size=512, **kw)
    assert len(set(map(len, sampled))) > 2 and model.training  # built in training mode, left so
    with pytest.raises(ValueError, match="generation must be 'transformers' or 'kv', got 'vllm'"):
        policy.sample(model, tok, prompts, generation="vllm", **kw)
