"""Worker for tests/test_trl_multiprocess.py: trains several small GRPO configurations in one launch.

Run by the test as ``python -m torch.distributed.run --nproc_per_node=2 trl_worker.py SPEC OUT`` (two
CPU processes, gloo) or as ``python trl_worker.py SPEC OUT`` (the one-process reference). Not collected
by pytest (no ``test_`` prefix); it runs only in its own processes.

Generation is replaced by a fixed ``rollout_func`` (TRL's public hook): completions are a function of
the row's global index only, of unequal lengths, so the 1- and 2-process runs see the same global
batch. That is a legitimate harness because the claim under test is the policy-optimisation step
(plan, shards, normalisers, collectives, counters), not sampling from the model.

For every case it writes ``OUT/<name>.rank<r>.pt`` (final parameters, counters, tokens fed) and
``OUT/<name>.started`` before it starts, so that the parent can tell which case hung or crashed.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared tiny-run arguments
from trl_fixtures import tiny_run  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

NUM_GENERATIONS = 4


def fixed_rollout(zero: str):
    """A rollout_func: row g (global index) of group slot j gets a completion of its own length.

    zero = "rank1": the second half of the global batch (rank 1's rows on two processes) gets the same
    completion in every slot of its group, hence a constant reward and all-zero advantages;
    "all": every row does; "first": every row of the first generation batch does, none later;
    "group0": every row but the first group's does; "none": no row does.
    """
    calls = [0]  # generation batches so far (every process calls once per batch)

    def rollout(prompts, trainer):
        first = calls[0] == 0
        calls[0] += 1
        tok = trainer.processing_class
        n_local = len(prompts)
        total = n_local * trainer.accelerator.num_processes
        offset = trainer.accelerator.process_index * n_local
        max_len = trainer.args.max_completion_length
        prompt_ids, completion_ids = [], []
        for i, p in enumerate(prompts):
            g = offset + i
            j = g % NUM_GENERATIONS
            constant = (
                zero == "all"
                or (zero == "first" and first)
                or (zero == "rank1" and g >= total // 2)
                or (zero == "group0" and g >= NUM_GENERATIONS)
            )
            slot = 0 if constant else j
            length = 1 + (len(p) + 3 * slot + g // NUM_GENERATIONS) % max_len  # unequal lengths
            text = "".join("7" if (k * (slot + 1) + len(p)) % 3 == 0 else "a" for k in range(length))
            prompt_ids.append(tok(p, add_special_tokens=False)["input_ids"])
            completion_ids.append(tok(text, add_special_tokens=False)["input_ids"])
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}

    return rollout


def digit_reward(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


def _count_fed(trainer):
    """Non-pad tokens of every micro-batch compute_loss sees (each PPO epoch counts again)."""
    fed = []
    original = trainer.compute_loss

    def counting(model, inputs, *a, **k):
        if "prompt_mask" in inputs:
            fed.append(int(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum()))
        return original(model, inputs, *a, **k)

    trainer.compute_loss = counting
    return fed


def run_case(case: dict, out: Path, global_rows: int) -> None:
    import datasets
    from trl import GRPOConfig, GRPOTrainer

    from costaware.integrations.trl import CostAwareGRPOConfig, CostAwareGRPOTrainer
    from costaware.tiny import char_tokenizer, tiny_qwen2

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    name = case["name"]
    over = dict(case.get("config", {}))
    stock = case.get("stock", False)
    tok = char_tokenizer()
    torch.manual_seed(0)
    model = tiny_qwen2(tok, hidden_size=32, num_layers=1, seed=0)
    work = out / f"{name}.work"
    if over.get("beta"):  # TRL builds the reference model from the policy's path
        if rank == 0:
            model.save_pretrained(work / "init")
        if world > 1:
            torch.distributed.barrier()
        model = type(model).from_pretrained(work / "init")
        with torch.no_grad():  # move the policy off the reference, so that the KL gradient is not 0
            gen = torch.Generator().manual_seed(1)
            for p in model.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
    ga = int(over.pop("gradient_accumulation_steps", 1))
    mine = dict(
        num_generations=NUM_GENERATIONS,
        per_device_train_batch_size=global_rows // world,
        gradient_accumulation_steps=ga,
        learning_rate=1e-2,
        ddp_timeout=60,  # a collective without a partner raises after 60 s instead of hanging
    )
    kw = tiny_run(work, **{**mine, **over})
    cls, cfg = (GRPOTrainer, GRPOConfig) if stock else (CostAwareGRPOTrainer, CostAwareGRPOConfig)
    if stock:
        kw = {k: v for k, v in kw.items() if not k.startswith("cost_aware_")}
    args = cfg(**kw)
    dataset = datasets.Dataset.from_dict({"prompt": [f"{i}+{i}=" * (1 + i % 5) for i in range(32)]})
    trainer = cls(
        model=model,
        args=args,
        reward_funcs=digit_reward,
        train_dataset=dataset,
        processing_class=tok,
        rollout_func=fixed_rollout(case.get("zero", "none")),
    )
    fed = _count_fed(trainer)
    init = torch.cat([p.detach().double().flatten().cpu() for p in trainer.model.parameters()])
    start = time.perf_counter()
    trainer.train()
    params = torch.cat([p.detach().double().flatten().cpu() for p in trainer.model.parameters()])
    logged = [h for h in trainer.state.log_history if any(k.startswith("cost_aware/") for k in h)]
    opt = trainer.optimizer.state_dict()["state"]  # per parameter: step count and moments (absent: never stepped)
    optimizer_state = {
        i: {k: torch.as_tensor(v).detach().double().cpu().clone() for k, v in st.items()} for i, st in opt.items()
    }
    result = {
        "params": params,
        "init": init,
        "fed": fed,
        "state": dict(getattr(trainer, "cost_aware_state", {})),
        "logged": logged,
        "global_step": trainer.state.global_step,
        "optimizer_state": optimizer_state,
        "learning_rates": [h["learning_rate"] for h in trainer.state.log_history if "learning_rate" in h],
        "seconds": time.perf_counter() - start,
        "world": world,
    }
    torch.save(result, out / f"{name}.rank{rank}.pt")


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    rank = int(os.environ.get("RANK", "0"))
    torch.set_num_threads(1)
    for case in spec["cases"]:
        if rank == 0:
            (out / f"{case['name']}.started").write_text("")
        try:
            run_case(case, out, spec["global_rows"])
        except Exception:
            (out / f"{case['name']}.rank{rank}.error").write_text(traceback.format_exc())
            raise  # a failed collective leaves the process group unusable: end this launch
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
