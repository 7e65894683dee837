"""The TRL adapter's KV rollout engine (cost_aware_generation='kv'): TRL's format, fresh weights, seeds, refusals."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl", reason="the 'trl' extra is not installed")
datasets = pytest.importorskip("datasets")

from costaware.generation import SamplingParams, kv_generate  # noqa: E402
from costaware.integrations.trl import CostAwareGRPOConfig, CostAwareGRPOTrainer  # noqa: E402
from costaware.integrations.trl.rollout import rollout_seed  # noqa: E402
from costaware.tiny import char_tokenizer, tiny_qwen2  # noqa: E402

TOK = char_tokenizer()
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def digit_reward(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


def _args(tmp_path, **over):
    kw = dict(output_dir=str(tmp_path), max_completion_length=12, num_generations=4, per_device_train_batch_size=4,
              steps_per_generation=2, max_steps=2, report_to="none", use_cpu=True, bf16=False, logging_steps=1,
              save_strategy="no", seed=0, beta=0.0, loss_type="dapo", learning_rate=1e-2, disable_tqdm=True,
              cost_aware_generation="kv", cost_aware_method="none")  # fmt: skip
    kw.update(over)
    return CostAwareGRPOConfig(**kw)


def _trainer(tmp_path, model=None, **over):
    torch.manual_seed(0)
    if model is None:
        model = tiny_qwen2(TOK, hidden_size=32, num_layers=1, seed=0)
        with torch.no_grad():  # an EOS within reach, so that completions of several lengths come out
            model.lm_head.weight[TOK.eos_token_id] += 0.3 * model.model.embed_tokens.weight.std()
    data = datasets.Dataset.from_dict({"prompt": [f"{i}+{i}=" * (1 + i % 4) for i in range(16)]})
    return CostAwareGRPOTrainer(model=model, args=_args(tmp_path, **over), reward_funcs=digit_reward,
                                train_dataset=data, processing_class=TOK)  # fmt: skip


def _prompt_ids(n=8):
    return [TOK(f"{i}+{i}=" * (1 + i % 3), add_special_tokens=False)["input_ids"] for i in range(n) for _ in range(4)]


def test_completions_have_trls_format_and_come_from_the_current_weights(tmp_path):
    trainer = _trainer(tmp_path)
    prompts = _prompt_ids()
    completions, logprobs = trainer._generate_single_turn(prompts, None, {}, 4)
    assert logprobs is None and len(completions) == len(prompts)
    eos = trainer.eos_token_ids
    for c in completions:
        assert 1 <= len(c) <= trainer.max_completion_length
        stops = [i for i, t in enumerate(c) if t in eos]
        assert stops in ([], [len(c) - 1]) and (stops or len(c) == trainer.max_completion_length)
    assert len({len(c) for c in completions}) > 2
    # exactly the sampler on the model's weights, seeded from (seed, process, step, call)
    model = trainer.accelerator.unwrap_model(trainer.model)

    def direct(call):
        gen = torch.Generator().manual_seed(rollout_seed(0, 0, 0, call, training=model.training))
        return kv_generate(model, prompts, max_new_tokens=12, eos_token_ids=eos, pad_token_id=TOK.pad_token_id,
                           params=SamplingParams(), generator=gen).completions  # fmt: skip

    assert completions == direct(0)
    with torch.no_grad():  # an optimiser step moves the weights: the next round samples from them
        for p in model.parameters():
            p.mul_(1.5)
    again, _ = trainer._generate_single_turn(prompts, None, {}, 4)
    assert again == direct(1) != direct(0)


def test_training_with_the_kv_engine_is_reproducible_and_moves_the_policy(tmp_path):
    def trained(path):
        trainer = _trainer(path, max_steps=4)
        before = [p.detach().clone() for p in trainer.model.parameters()]
        trainer.train()
        after = [p.detach().clone() for p in trainer.model.parameters()]
        return before, after, trainer

    b1, a1, tr = trained(tmp_path / "a")
    _, a2, _ = trained(tmp_path / "b")
    assert any(not torch.equal(x, y) for x, y in zip(b1, a1, strict=True))  # it trained
    assert all(torch.equal(x, y) for x, y in zip(a1, a2, strict=True))  # same seed, same run
    assert tr._ca_rollout_at == (2, True)  # rounds at steps 0 and 2 (steps_per_generation=2)


@pytest.mark.parametrize(
    "over,match",
    [
        (dict(cost_aware_generation="vllm"), "cost_aware_generation must be one of"),
        (dict(min_p=0.1), "min_p=0.1"),
        (dict(repetition_penalty=1.2), "repetition_penalty=1.2"),
        (dict(generation_kwargs={"top_k": 5}), "generation_kwargs"),
        (dict(use_transformers_continuous_batching=True), "use_transformers_continuous_batching=True"),
    ],
)
def test_unsupported_generation_settings_are_refused_naming_them(tmp_path, over, match):
    with pytest.raises(ValueError, match=match):
        _args(tmp_path, **over)


def test_models_and_trainers_the_sampler_cannot_serve_are_refused(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    llama = LlamaForCausalLM(LlamaConfig(vocab_size=len(TOK), hidden_size=16, intermediate_size=16,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                         pad_token_id=TOK.pad_token_id, eos_token_id=TOK.eos_token_id))  # fmt: skip
    with pytest.raises(ValueError, match="cost_aware_generation='kv': model must be a transformers Qwen2ForCausalLM"):
        _trainer(tmp_path, model=llama)
    model = tiny_qwen2(TOK, hidden_size=32, num_layers=1)
    data = datasets.Dataset.from_dict({"prompt": ["1+1="] * 8})

    def rollout(prompts, trainer):
        raise AssertionError("not reached")

    with pytest.raises(ValueError, match="does not support rollout_func"):
        CostAwareGRPOTrainer(model=model, args=_args(tmp_path), reward_funcs=digit_reward, train_dataset=data,
                             processing_class=TOK, rollout_func=rollout)  # fmt: skip
    trainer = _trainer(tmp_path)
    with pytest.raises(ValueError, match="multimodal"):
        trainer._generate_single_turn(_prompt_ids(1), [[None]], {}, 4)


def test_transformers_engine_is_trls_own_path(tmp_path):
    trainer = _trainer(tmp_path, cost_aware_generation="transformers")
    torch.manual_seed(3)
    ours, _ = trainer._generate_single_turn(_prompt_ids(2), None, {}, 4)
    from trl import GRPOTrainer

    torch.manual_seed(3)
    stock, _ = GRPOTrainer._generate_single_turn(trainer, _prompt_ids(2), None, {}, 4)
    assert ours == stock and trainer._ca_rollout_at is None


def test_the_configs_temperature_top_k_and_top_p_reach_the_sampler(tmp_path):
    trainer = _trainer(tmp_path, temperature=1.5, top_k=5, top_p=0.5)
    prompts = _prompt_ids()
    completions, _ = trainer._generate_single_turn(prompts, None, {}, 4)
    model = trainer.accelerator.unwrap_model(trainer.model)

    def direct(params):
        gen = torch.Generator().manual_seed(rollout_seed(0, 0, 0, 0, training=model.training))
        return kv_generate(model, prompts, max_new_tokens=12, eos_token_ids=trainer.eos_token_ids,
                           pad_token_id=TOK.pad_token_id, params=params, generator=gen).completions  # fmt: skip

    assert completions == direct(SamplingParams(temperature=1.5, top_k=5, top_p=0.5))
    for dropped in (SamplingParams(temperature=1.5, top_p=0.5), SamplingParams(temperature=1.5, top_k=5),
                    SamplingParams(top_k=5, top_p=0.5)):  # fmt: skip
        assert completions != direct(dropped)
