"""GPU check: the TRL adapter and the verl plugin on a Qwen2-0.5B-like policy on CUDA in bf16.

Needs PyTorch, transformers and accelerate; TRL for the first part (pure Python: its wheel can be carried
to a machine without it, ``pip download trl==1.16.* --no-deps``, then ``PYTHONPATH=<wheel>``); verl and
Ray for the second, which is skipped with the reason printed when they are absent (Ray's wheel is too
large to carry). Builds the policy and a character tokenizer in code (random weights, no hub).

1. TRL: for each method (``none`` = stock TRL's split, ``nonzero``, ``p_star``) trains a few generation
   rounds with real ``model.generate`` and prints, per method: NaN check (loss and parameters), tokens
   logged by the adapter against tokens fed to the loss, policy-optimisation seconds per round, peak
   memory, and PO time / tokens against stock. Exit code 1 if any check fails.
2. verl: the whole PO phase of ``benchmarks/bench_verl_po.py`` (old and reference log-prob passes and the
   actor update, through verl's real trainer methods) on identical pools, stock against the plugin,
   printing time saved / tokens saved.
3. ``--verl-loop``: verl's own trainer (``python -m verl.trainer.main_ppo``: Ray, FSDP workers, vLLM
   rollouts) with the plugin, through ``benchmarks/bench_verl_e2e.py --gpu``: stock, ``nonzero`` and
   ``p_star`` for a few steps on the tiny ``sort`` policy, with verl's own timing metrics. Run it with the
   interpreter of an environment that has ``verl[vllm]`` and no TRL (``--verl-python``; see
   ``docs/verl-cpu.md``). It needs a GPU and vLLM, so only a maintainer with one can run it.

    python scripts/gpu_check.py                 # CUDA, bf16, Qwen2-0.5B-like (~360M parameters with chars)
    python scripts/gpu_check.py --size 75m      # the smaller model
    python scripts/gpu_check.py --cpu --tiny    # CPU dry run of the same code path (CI, seconds)
    python scripts/gpu_check.py --skip-verl --verl-loop --verl-python .venv-verl/bin/python

The CUDA and CPU paths are the same functions; only the device, the dtype and the model size differ.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import resource
import sys
import time
from dataclasses import asdict, dataclass

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

# model sizes: (hidden, layers, heads, kv heads, intermediate)
SIZES = {
    "qwen2-0.5b": (896, 24, 14, 2, 4864),  # Qwen2-0.5B's body; the character vocabulary keeps embeddings small
    "75m": (768, 12, 12, 4, 2048),
}
TINY = (32, 1, 4, 2, 64)


@dataclass
class Result:
    method: str
    params_m: float
    rounds: int
    steps: int
    finite: bool
    losses: list[float]
    tokens_logged: float
    tokens_fed: int
    tokens_plain_logged: float
    po_seconds_per_round: float
    train_seconds: float
    peak_memory_mb: float


def reward_digits(completions, **kwargs):
    """Fraction of digits: a dense reward that differs within groups even for a random policy."""
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


def _last(history: list[dict], *names: str) -> float:
    """Last logged value of the first metric name present (the adapter's names, old and new)."""
    for h in reversed(history):
        for name in names:
            if name in h:
                return float(h[name])
    return float("nan")


def run_method(method: str, a: argparse.Namespace) -> Result:
    import datasets
    import torch
    from transformers import PrinterCallback

    from costaware.integrations.trl import CostAwareGRPOConfig, CostAwareGRPOTrainer
    from costaware.tiny import char_tokenizer, tiny_qwen2

    hidden, layers, heads, kv, inter = TINY if a.tiny else SIZES[a.size]
    tok = char_tokenizer()
    torch.manual_seed(a.seed)
    model = tiny_qwen2(
        tok,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv,
        intermediate_size=inter,
        seed=a.seed,
    )
    n_params = sum(p.numel() for p in model.parameters())
    spg = 2
    args = CostAwareGRPOConfig(
        output_dir=os.path.join(a.out, method),
        cost_aware_method=method,
        loss_type=a.loss_type,
        max_completion_length=a.completion_length,
        num_generations=a.num_generations,
        per_device_train_batch_size=a.batch,
        steps_per_generation=spg,
        max_steps=a.rounds * spg,
        learning_rate=1e-5,
        beta=0.0,
        use_cpu=a.cpu,
        bf16=not a.cpu,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        seed=a.seed,
        disable_tqdm=True,
    )
    prompts = [f"{i}+{2 * i}=" * (1 + i % 4) for i in range(64)]  # unequal prompt lengths
    trainer = CostAwareGRPOTrainer(
        model=model,
        args=args,
        reward_funcs=reward_digits,
        train_dataset=datasets.Dataset.from_dict({"prompt": prompts}),
        processing_class=tok,
    )
    trainer.remove_callback(PrinterCallback)  # one summary line per method instead of every log dict
    fed: list[int] = []
    original = trainer.compute_loss

    def counting(model, inputs, *args, **kwargs):
        if "prompt_mask" in inputs:
            fed.append(int(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum()))
        return original(model, inputs, *args, **kwargs)

    trainer.compute_loss = counting
    cuda = torch.cuda.is_available() and not a.cpu
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - start
    peak = (
        torch.cuda.max_memory_allocated() / 2**20
        if cuda
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # process peak RSS (Linux: KiB)
    )
    hist = trainer.state.log_history
    losses = [float(h["loss"]) for h in hist if "loss" in h]
    finite = all(math.isfinite(x) for x in losses) and all(
        bool(torch.isfinite(p).all()) for p in trainer.model.parameters()
    )
    po = _last(hist, "cost_aware/total/po_seconds", "cost_aware/po_seconds")
    gens = _last(hist, "cost_aware/total/generations", "cost_aware/generations")
    return Result(
        method=method,
        params_m=n_params / 1e6,
        rounds=a.rounds,
        steps=trainer.state.global_step,
        finite=finite,
        losses=losses,
        tokens_logged=_last(hist, "cost_aware/total/tokens", "cost_aware/tokens"),
        tokens_fed=sum(fed),
        tokens_plain_logged=_last(hist, "cost_aware/total/tokens_plain", "cost_aware/tokens_plain"),
        po_seconds_per_round=po / gens if gens > 0 else float("nan"),
        train_seconds=train_seconds,
        peak_memory_mb=peak,
    )


def check(results: list[Result]) -> list[str]:
    """Failed checks, as readable lines (empty when all pass)."""
    bad = []
    for r in results:
        if not r.finite:
            bad.append(f"{r.method}: NaN or inf in loss or parameters")
        if not r.losses:
            bad.append(f"{r.method}: no loss logged")
        if not (r.tokens_logged > 0 and r.tokens_logged == r.tokens_fed):
            bad.append(f"{r.method}: tokens logged {r.tokens_logged} != tokens fed {r.tokens_fed}")
        if not r.po_seconds_per_round > 0:
            bad.append(f"{r.method}: PO seconds per round not logged ({r.po_seconds_per_round})")
    return bad


def verl_check(a: argparse.Namespace) -> list[str]:
    """verl's PO phase with the plugin against stock (``benchmarks/bench_verl_po.py``); failed checks."""
    missing = [m for m in ("verl", "ray", "hydra", "tensordict") if importlib.util.find_spec(m) is None]
    if missing:
        print(
            f"verl check skipped: {', '.join(missing)} not importable here (verl needs Ray, whose wheel is "
            "too large to carry to the device machine)",
            flush=True,
        )
        return []
    import dataclasses

    import torch

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(root, "benchmarks"))
    import bench_verl_po as bench
    from bench_po_time import make_pool

    from costaware.experiments.reproduce import PROFILES
    from costaware.experiments.tasks import get_task
    from costaware.tiny import char_tokenizer, tiny_qwen2

    hidden, layers, heads, kv, inter = TINY if a.tiny else SIZES[a.size]
    prof = dataclasses.replace(PROFILES["quick" if a.tiny else "default"], hidden_size=hidden, num_layers=layers)
    task = get_task(prof.task)
    tok = char_tokenizer(task.alphabet, model_max_length=256)
    base = tiny_qwen2(tok, hidden_size=hidden, num_layers=layers, num_heads=heads, num_kv_heads=kv,
                      intermediate_size=inter, max_position_embeddings=256, seed=a.seed)  # fmt: skip
    cuda = torch.cuda.is_available() and not a.cpu
    device = "cuda" if cuda else "cpu"
    base = base.to(device, dtype=torch.bfloat16 if cuda else torch.float32).train()
    ref = bench.copy.deepcopy(base).eval()
    batches = [bench.to_dataproto(make_pool(tok, prof, s, 0.3, prof.task), prof.generations) for s in range(2)]
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    print(f"verl: {len(batches[0])} rows per batch, {prof.steps_per_generation} mini-batches, on {device}", flush=True)
    lines = bench.compare(base, ref, prof, batches, repeats=1 if a.tiny else 2, device=device, sync=sync)
    for line in lines:
        print(line, flush=True)
    finite = all(bool(torch.isfinite(p).all()) for p in base.parameters())
    # One table row per arm, each starting with the arm's name: p_star's row means the PO phase ran through.
    ran = any(line.split()[:1] == ["p_star"] for line in lines)
    return [] if finite and ran else ["verl: the PO phase did not complete"]


def verl_loop_check(a: argparse.Namespace) -> list[str]:
    """verl's main_ppo with vLLM rollouts: stock, nonzero, p_star (bench_verl_e2e.py --gpu); failures listed."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cmd = [
        a.verl_python,
        os.path.join(root, "benchmarks", "bench_verl_e2e.py"),
        "--gpu",
        "--steps",
        str(a.verl_steps),
        "--out",
        os.path.join(os.path.abspath(a.out), "verl_loop"),
    ]
    print("verl loop: " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    print(proc.stdout, flush=True)
    if proc.returncode != 0:
        return [f"verl loop: bench_verl_e2e.py exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"]
    return [
        f"verl loop: {line}" for line in proc.stdout.splitlines() if "refused or failed" in line and "p_star" in line
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="run on CPU in float32 (dry run)")
    p.add_argument("--tiny", action="store_true", help="a ~10k-parameter model instead of ~75M")
    p.add_argument("--rounds", type=int, default=None, help="generation rounds per method (default 4; tiny 2)")
    p.add_argument("--methods", default="none,nonzero,p_star", help="comma-separated cost_aware_method values")
    p.add_argument("--size", choices=sorted(SIZES), default="qwen2-0.5b", help="model size (default: %(default)s)")
    p.add_argument("--skip-verl", action="store_true", help="skip the verl PO-phase check")
    p.add_argument("--verl-loop", action="store_true", help="also run verl's main_ppo with vLLM (GPU only)")
    p.add_argument("--verl-python", default=sys.executable, help="interpreter of the verl environment (no TRL)")
    p.add_argument("--verl-steps", type=int, default=4, help="steps per method in the verl loop check")
    p.add_argument("--loss-type", default="dapo")
    p.add_argument("--batch", type=int, default=None, help="rows per step per device (default 32; tiny 8)")
    p.add_argument("--num-generations", type=int, default=8)
    p.add_argument("--completion-length", type=int, default=None, help="max completion tokens (128; tiny 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="gpu_check_out", help="output folder (trainer dirs and results.json)")
    a = p.parse_args(argv)
    if a.verl_loop and a.cpu:
        p.error("--verl-loop runs vLLM on CUDA; on a CPU, tests/test_verl_e2e.py runs the same loop")
    if a.verl_steps < 1:
        p.error(f"--verl-steps must be >= 1, got {a.verl_steps}")
    a.rounds = a.rounds or (2 if a.tiny else 4)
    a.batch = a.batch or (8 if a.tiny else 32)
    a.completion_length = a.completion_length or (8 if a.tiny else 128)
    if (a.batch * 2) % a.num_generations:
        p.error(f"--batch {a.batch} x 2 steps must be a multiple of --num-generations {a.num_generations}")
    for name in ("rounds", "batch", "completion_length"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    import torch

    if not a.cpu and not torch.cuda.is_available():
        p.error("no CUDA device: run with --cpu (and --tiny for the dry run)")
    device = "cpu" if a.cpu else torch.cuda.get_device_name(0)
    print(f"device: {device}, dtype: {'float32' if a.cpu else 'bf16'}, torch {torch.__version__}", flush=True)
    results = []
    started = time.perf_counter()
    trl_missing = importlib.util.find_spec("trl") is None
    if trl_missing:
        print("TRL check skipped: trl is not importable here (carry its wheel, see the docstring)", flush=True)
    for method in [] if trl_missing else a.methods.split(","):
        r = run_method(method.strip(), a)
        results.append(r)
        print(
            f"{r.method:>8}: {r.params_m:.3g}M params, {r.steps} steps, finite={r.finite}, "
            f"tokens logged {r.tokens_logged:.0f} (fed {r.tokens_fed}, plain {r.tokens_plain_logged:.0f}), "
            f"PO {r.po_seconds_per_round:.3f} s/round, train {r.train_seconds:.1f} s, "
            f"peak memory {r.peak_memory_mb:.0f} MiB",
            flush=True,
        )
    stock = next((r for r in results if r.method == "none"), None)
    if stock is not None:
        for r in results:
            if r is not stock and stock.po_seconds_per_round > 0:
                print(
                    f"{r.method} vs stock: PO time x{r.po_seconds_per_round / stock.po_seconds_per_round:.2f}, "
                    f"tokens x{r.tokens_logged / max(stock.tokens_logged, 1):.2f}"
                )
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump([asdict(r) for r in results], f, indent=1)
    bad = check(results)
    if not a.skip_verl:
        bad += verl_check(a)
    if a.verl_loop:
        bad += verl_loop_check(a)
    print(f"total {time.perf_counter() - started:.0f} s")
    print("FAIL:\n  " + "\n  ".join(bad) if bad else "OK: all checks passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
