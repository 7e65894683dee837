"""``costaware eval``: mean@k of a local checkpoint on GSM8K, MATH500, AIME, AMC (or a verl parquet).

Writes to ``--out``: ``results.json`` (config, summary, every problem's responses and verdicts),
``summary.md`` (a Markdown table) and ``progress.jsonl`` (finished problems; a rerun with the same
arguments resumes from it).

    costaware eval --model ckpt/ --benchmark aime --data AIME_Dataset_1983_2024.csv --k 32 --out runs/aime
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

DESCRIPTION = (
    "mean@k accuracy (the paper's pass@1 / mean@32) of a local checkpoint on AIME 1983-2024, AMC, "
    "MATH500 or GSM8K, answers checked with math-verify. No hub is reachable here: pass the benchmark "
    "file with --data (jsonl, json, parquet or csv in the benchmark's public format)."
)


def register(subparsers: Any) -> argparse.ArgumentParser:
    from costaware.evaluation.data import BENCHMARKS, QWEN_MATH_INSTRUCTION

    p = subparsers.add_parser("eval", help=DESCRIPTION.split(".")[0] + ".", description=DESCRIPTION)
    p.add_argument("--model", required=True, help="local checkpoint folder (config, weights, tokenizer)")
    p.add_argument("--benchmark", required=True, choices=sorted(BENCHMARKS))
    p.add_argument("--data", default=None, help="benchmark file or folder; omitted: try the hub")
    p.add_argument("--split", default=None, help="hub split (default: the benchmark's evaluation split)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--k", type=int, default=32, help="samples per problem (default 32, as in the paper)")
    p.add_argument("--limit", type=int, default=None, help="evaluate only the first N problems")
    p.add_argument(
        "--pass-k", type=int, nargs="+", default=None, help="pass@k values (default 1, 2, 4, ..., k)"
    )
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--top-k", type=int, default=0, help="0 disables top-k")
    p.add_argument("--max-new-tokens", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--engine",
        choices=["auto", "vllm", "transformers"],
        default="auto",
        help="auto: vLLM when installed with a GPU, else transformers",
    )
    p.add_argument("--batch-size", type=int, default=32, help="transformers: sequences per generate call")
    p.add_argument(
        "--device", default=None, help="transformers: cpu, cuda, cuda:1 ... (default: cuda if any)"
    )
    p.add_argument("--dtype", default="auto", help="auto, bfloat16, float16, float32")
    p.add_argument("--tensor-parallel-size", type=int, default=1, help="vLLM only")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="vLLM only")
    p.add_argument("--instruction", default=QWEN_MATH_INSTRUCTION, help="appended to each problem")
    p.add_argument(
        "--instruction-role",
        choices=["user", "system"],
        default="user",
        help="user: after the problem; system: as the system message (Qwen2.5-Math README)",
    )
    p.add_argument(
        "--no-chat-template", action="store_true", help="plain-text prompts even if a template exists"
    )
    p.add_argument(
        "--require-boxed",
        action="store_true",
        help="count only \\boxed{} (or 'final answer is') answers, not a last stray number",
    )
    p.add_argument("--verify-timeout", type=int, default=5, help="math-verify timeout per parse/compare (s)")
    p.add_argument("--overwrite", action="store_true", help="discard progress.jsonl in --out and start over")
    p.add_argument("--no-progress", action="store_true", help="no tqdm bar")
    p.set_defaults(func=main)
    return p


def main(args: argparse.Namespace) -> int:
    import platform

    from costaware.evaluation.data import build_prompt, load_benchmark
    from costaware.evaluation.generate import SamplingConfig, load_tokenizer, make_generator
    from costaware.evaluation.runner import evaluate, markdown_table
    from costaware.evaluation.verify import MathVerifier

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out must be a folder, got {str(out)!r}, which is a file")
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / "progress.jsonl"
    if args.overwrite and checkpoint.exists():
        checkpoint.unlink()

    records = load_benchmark(args.benchmark, args.data, split=args.split, limit=args.limit)
    sampling = SamplingConfig(
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
    )
    tokenizer = load_tokenizer(args.model)  # for the chat template, whichever engine samples
    prompt_options = {
        "instruction": args.instruction,
        "instruction_role": args.instruction_role,
        "use_chat_template": not args.no_chat_template,
    }
    prompts = [build_prompt(r, tokenizer, **prompt_options) for r in records]
    verifier = MathVerifier(require_boxed=args.require_boxed, timeout_seconds=args.verify_timeout)
    generator = make_generator(
        args.model,
        sampling,
        engine=args.engine,
        device=args.device,
        dtype=args.dtype,
        batch_size=args.batch_size,
        tokenizer=tokenizer,
        **(
            {
                "tensor_parallel_size": args.tensor_parallel_size,
                "gpu_memory_utilization": args.gpu_memory_utilization,
            }
            if args.engine == "vllm"
            else {}
        ),
    )
    run_config = {
        "model": str(Path(args.model).resolve()),
        "benchmark": args.benchmark,
        "data": str(Path(args.data).resolve()) if args.data else None,
        "split": args.split,
        "limit": args.limit,
        "engine": generator.engine,
        "sampling": sampling.to_dict(),
        "prompt": prompt_options,
        "batch_size": args.batch_size if generator.engine == "transformers" else None,
        "dtype": args.dtype,
    }
    report = evaluate(
        records,
        generator,
        k=args.k,
        verifier=verifier,
        pass_ks=args.pass_k,
        prompts=prompts,
        checkpoint=checkpoint,
        run_config=run_config,
        progress=not args.no_progress,
    )
    report.config["environment"] = _environment(platform.python_version())
    (out / "results.json").write_text(json.dumps(report.to_dict(), indent=1, default=str), encoding="utf-8")
    table = markdown_table(report.summary, title=f"{args.benchmark}: {Path(args.model).name}")
    (out / "summary.md").write_text(table, encoding="utf-8")
    print(table, end="")
    print(f"wrote {out / 'results.json'} and {out / 'summary.md'}", file=sys.stderr)
    return 0


def _environment(python: str) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    env: dict[str, Any] = {"python": python}
    for name in ("torch", "transformers", "math-verify", "vllm"):
        try:
            env[name] = version(name)
        except PackageNotFoundError:
            env[name] = None
    return env
