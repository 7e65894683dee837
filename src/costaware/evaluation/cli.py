"""``costaware eval``: mean@k of a local checkpoint on GSM8K, MATH500, AIME, AMC (or a verl parquet).

Writes to ``--out``: ``results.json`` (config, summary, every problem's responses and verdicts),
``summary.md`` (a Markdown table) and ``progress.jsonl`` (finished problems; a rerun with the same
arguments resumes from it). Every argument is checked, and the benchmark and ``--responses`` files
read, before ``--out`` is created or a model loads.

    costaware eval --model ckpt/ --benchmark aime --data AIME_Dataset_1983_2024.csv --k 32 --out runs/aime
    costaware eval --responses generated.jsonl --benchmark aime --data AIME_Dataset_1983_2024.csv --out runs/scored

The ``--responses`` format is in :mod:`costaware.evaluation.responses`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

DESCRIPTION = (
    "mean@k accuracy (the paper's pass@1 / mean@32) of a local checkpoint on AIME 1983-2024, AMC, "
    "MATH500 or GSM8K, answers checked with math-verify; or, with --responses, of responses already "
    "generated. Without network, pass the benchmark file with --data (jsonl, json, parquet or csv in "
    "the benchmark's public format)."
)
DEFAULT_K = 32
DTYPES = ("auto", "bfloat16", "float16", "float32")


def register(subparsers: Any) -> argparse.ArgumentParser:
    from costaware.evaluation.data import BENCHMARKS, QWEN_MATH_INSTRUCTION

    p = subparsers.add_parser("eval", help=DESCRIPTION.split(";")[0] + ".", description=DESCRIPTION)
    src = p.add_argument_group("what to score")
    src.add_argument("--model", default=None, help="local checkpoint folder (config, weights, tokenizer)")
    src.add_argument(
        "--responses",
        default=None,
        metavar="FILE",
        help="score these responses instead of generating (JSON Lines, one problem per line: id, "
        "responses, and answer unless --benchmark gives it; optional prompt, num_tokens)",
    )
    src.add_argument(
        "--benchmark",
        default=None,
        choices=sorted(BENCHMARKS),
        help="the benchmark (required with --model; with --responses it gives the gold answers)",
    )
    src.add_argument("--data", default=None, help="benchmark file or folder (default: the hub)")
    src.add_argument("--split", default=None, help="hub split (default: the benchmark's evaluation split)")
    src.add_argument("--limit", type=int, default=None, help="score only the first N problems (default: all)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument(
        "--k",
        type=int,
        default=None,
        help=f"samples per problem (default: {DEFAULT_K}, as in the paper; with --responses: the "
        "number per line, which --k, if given, must equal)",
    )
    p.add_argument("--pass-k", type=int, nargs="+", default=None, help="pass@k values (default: 1, 2, 4, ..., k)")
    gen = p.add_argument_group("generation (with --model)")
    d = " (default: %(default)s)"
    gen.add_argument("--temperature", type=float, default=0.6, help="0: greedy" + d)
    gen.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling, in (0, 1]" + d)
    gen.add_argument("--top-k", type=int, default=0, help="0 disables top-k" + d)
    gen.add_argument("--max-new-tokens", type=int, default=2048, help="per response" + d)
    gen.add_argument("--seed", type=int, default=0, help="sampling seed" + d)
    gen.add_argument(
        "--engine",
        choices=["auto", "vllm", "transformers"],
        default="auto",
        help="auto: vLLM when installed with a GPU, else transformers" + d,
    )
    gen.add_argument("--batch-size", type=int, default=32, help="transformers: sequences per generate call" + d)
    gen.add_argument("--device", default=None, help="transformers: cpu, cuda, cuda:1 ... (default: cuda if any)")
    gen.add_argument("--dtype", default="auto", choices=DTYPES, help="weights dtype" + d)
    gen.add_argument("--tensor-parallel-size", type=int, default=1, help="vLLM only" + d)
    gen.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="vLLM only, in (0, 1]" + d)
    gen.add_argument(
        "--instruction",
        default=QWEN_MATH_INSTRUCTION,
        help="appended to each problem (default: '%(default)s')",
    )
    gen.add_argument(
        "--instruction-role",
        choices=["user", "system"],
        default="user",
        help="user: after the problem; system: as the system message (Qwen2.5-Math README)" + d,
    )
    gen.add_argument(
        "--no-chat-template",
        action="store_true",
        help="plain-text prompts even if a template exists (default: the tokenizer's template)",
    )
    p.add_argument(
        "--require-boxed",
        action="store_true",
        help="count only \\boxed{} (or 'final answer is') answers, not a last stray number (default: off)",
    )
    p.add_argument("--verify-timeout", type=int, default=5, help="math-verify timeout per parse/compare, s" + d)
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="discard progress.jsonl in --out and start over (default: resume)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar (default: one on stderr)")
    p.set_defaults(func=main)
    return p


def check_args(args: argparse.Namespace) -> None:
    """Every argument, before anything is loaded or written; ValueError naming the flag and its value.

    Numbers first, then paths: a bad --k is reported as such whatever --model says."""

    def need(ok: bool, flag: str, what: str, value: Any) -> None:
        if not ok:
            raise ValueError(f"{flag} must be {what}, got {value!r}")

    def finite(x: float) -> bool:
        return x == x and abs(x) != float("inf")

    need(args.k is None or args.k >= 1, "--k", "a positive integer", args.k)
    need(args.limit is None or args.limit >= 1, "--limit", "a positive integer", args.limit)
    for x in args.pass_k or []:
        need(x >= 1, "--pass-k", "positive integers", x)
        need(args.k is None or x <= args.k, "--pass-k", f"at most --k ({args.k})", x)
    need(
        finite(args.temperature) and args.temperature >= 0,
        "--temperature",
        "a finite number >= 0",
        args.temperature,
    )
    need(finite(args.top_p) and 0 < args.top_p <= 1, "--top-p", "in (0, 1]", args.top_p)
    need(args.top_k >= 0, "--top-k", ">= 0 (0 disables it)", args.top_k)
    need(args.max_new_tokens >= 1, "--max-new-tokens", "a positive integer", args.max_new_tokens)
    need(args.seed >= 0, "--seed", "a non-negative integer", args.seed)
    need(args.batch_size >= 1, "--batch-size", "a positive integer", args.batch_size)
    need(
        args.tensor_parallel_size >= 1,
        "--tensor-parallel-size",
        "a positive integer",
        args.tensor_parallel_size,
    )
    u = args.gpu_memory_utilization
    need(finite(u) and 0 < u <= 1, "--gpu-memory-utilization", "in (0, 1]", u)
    need(args.verify_timeout >= 1, "--verify-timeout", "a positive integer (seconds)", args.verify_timeout)
    if args.data is not None:
        need(Path(args.data).exists(), "--data", "an existing file or folder", args.data)
    if args.responses is None:
        if args.model is None:
            raise ValueError("--model is required (or --responses FILE, to score responses generated elsewhere)")
        if args.benchmark is None:
            raise ValueError("--benchmark is required with --model")
        model = Path(args.model)
        need(model.is_dir(), "--model", "a local checkpoint folder", args.model)
        need(
            (model / "config.json").is_file(),
            "--model",
            "a checkpoint folder holding config.json",
            args.model,
        )
    else:
        if args.model is not None:
            raise ValueError("--model and --responses exclude each other: --responses scores what is already generated")
        need(Path(args.responses).is_file(), "--responses", "an existing JSON Lines file", args.responses)
        if args.benchmark is None and (args.data is not None or args.split is not None):
            raise ValueError("--data and --split need --benchmark (it says how to read the file)")
    if args.device is not None:
        import torch

        try:
            torch.device(args.device)
        except (RuntimeError, ValueError):
            raise ValueError(
                f"--device must be a torch device such as cpu, cuda or cuda:1, got {args.device!r}"
            ) from None
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out must be a folder, got {str(out)!r}, which is a file")


def main(args: argparse.Namespace) -> int:
    import platform

    from costaware.evaluation.data import build_prompt, load_benchmark
    from costaware.evaluation.responses import read_responses
    from costaware.evaluation.runner import evaluate, markdown_table
    from costaware.evaluation.verify import MathVerifier

    check_args(args)
    # the inputs next: a bad line fails before --out exists and before any model loads
    benchmark = None
    if args.benchmark is not None:
        limit = None if args.responses else args.limit  # --responses: the limit applies to its lines
        benchmark = load_benchmark(args.benchmark, args.data, split=args.split, limit=limit)
    run_config: dict[str, Any] = {
        "benchmark": args.benchmark,
        "data": str(Path(args.data).resolve()) if args.data else None,
        "split": args.split,
        "limit": args.limit,
    }
    if args.responses is not None:
        records, responses, prompts = read_responses(args.responses, benchmark=benchmark, limit=args.limit)
        k = len(responses[0])
        if args.k is not None and args.k != k:
            raise ValueError(f"--k must equal the number of responses per line in {args.responses} ({k}), got {args.k}")
        run_config["responses"] = str(Path(args.responses).resolve())
        title = f"{args.benchmark or 'responses'}: {Path(args.responses).name}"
    else:
        assert benchmark is not None  # check_args: --benchmark is required with --model
        records, responses, k = benchmark, None, args.k or DEFAULT_K
        title = f"{args.benchmark}: {Path(args.model).name}"
    for x in args.pass_k or []:
        if x > k:
            raise ValueError(f"--pass-k must be at most k ({k}), got {x}")
    verifier = MathVerifier(require_boxed=args.require_boxed, timeout_seconds=args.verify_timeout)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / "progress.jsonl"
    if args.overwrite and checkpoint.exists():
        checkpoint.unlink()

    generator = None
    if responses is None:
        generator, prompts, generation = _generator(args, records, build_prompt)
        run_config.update(generation)
    report = evaluate(
        records,
        generator,
        k=k,
        verifier=verifier,
        pass_ks=args.pass_k,
        prompts=prompts,
        responses=responses,
        checkpoint=checkpoint,
        run_config=run_config,
        progress=not args.no_progress,
    )
    report.config["environment"] = _environment(platform.python_version())
    (out / "results.json").write_text(json.dumps(report.to_dict(), indent=1, default=str), encoding="utf-8")
    table = markdown_table(report.summary, title=title)
    (out / "summary.md").write_text(table, encoding="utf-8")
    print(table, end="")
    print(f"wrote {out / 'results.json'} and {out / 'summary.md'}", file=sys.stderr)
    return 0


def _generator(args: argparse.Namespace, records: list[Any], build_prompt: Any) -> tuple[Any, list[str], dict]:
    """The tokenizer, the prompts and the generator of a --model run, and the settings to record."""
    from costaware.evaluation.generate import SamplingConfig, load_tokenizer, make_generator

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
    vllm = {
        "tensor_parallel_size": args.tensor_parallel_size,
        "gpu_memory_utilization": args.gpu_memory_utilization,
    }
    generator = make_generator(
        args.model,
        sampling,
        engine=args.engine,
        device=args.device,
        dtype=args.dtype,
        batch_size=args.batch_size,
        tokenizer=tokenizer,
        **(vllm if args.engine == "vllm" else {}),
    )
    config = {
        "model": str(Path(args.model).resolve()),
        "engine": generator.engine,
        "sampling": sampling.to_dict(),
        "prompt": prompt_options,
        "batch_size": args.batch_size if generator.engine == "transformers" else None,
        "dtype": args.dtype,
    }
    return generator, prompts, config


def _environment(python: str) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    env: dict[str, Any] = {"python": python}
    for name in ("torch", "transformers", "math-verify", "vllm"):
        try:
            env[name] = version(name)
        except PackageNotFoundError:
            env[name] = None
    return env
