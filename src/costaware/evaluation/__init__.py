"""Math-benchmark evaluation as in the paper's §5.4: pass@1 as mean@k (mean@32) with math-verify.

Loaders for GSM8K, MATH500, AIME 1983–2024, AMC and verl/DAPO parquet (:mod:`.data`, reading files
with :mod:`.files`), a math-verify answer checker (:mod:`.verify`), mean@k and unbiased pass@k
(:mod:`.metrics`), vLLM/transformers sampling (:mod:`.generate`), responses generated elsewhere
(:mod:`.responses`), and :func:`evaluate`, which ties them together and resumes. The
``costaware eval`` job is :mod:`.cli`.

>>> from costaware.evaluation import evaluate, load_benchmark, fixture_path    # doctest: +SKIP
>>> report = evaluate(load_benchmark("math500", fixture_path("math500")), model=m, tokenizer=t, k=32)  # doctest: +SKIP
>>> report.summary["mean_at_k"], report.summary["mean_at_k_stderr"]           # doctest: +SKIP
"""

from costaware.evaluation.data import (
    BENCHMARKS,
    QWEN_MATH_INSTRUCTION,
    DatasetUnavailableError,
    EvalRecord,
    build_messages,
    build_prompt,
    fixture_path,
    gsm8k_gold,
    load_benchmark,
)
from costaware.evaluation.files import read_rows
from costaware.evaluation.generate import (
    Completion,
    SamplingConfig,
    TransformersGenerator,
    VLLMGenerator,
    is_char_tokenizer,
    load_model,
    load_tokenizer,
    make_generator,
)
from costaware.evaluation.metrics import (
    mean_at_k,
    pass_at_k,
    per_problem_accuracy,
    standard_error,
    summarize_correctness,
)
from costaware.evaluation.responses import read_responses
from costaware.evaluation.runner import EvalReport, ProblemResult, evaluate, markdown_table

__all__ = [
    "BENCHMARKS",
    "QWEN_MATH_INSTRUCTION",
    "Completion",
    "DatasetUnavailableError",
    "EvalRecord",
    "EvalReport",
    "ProblemResult",
    "SamplingConfig",
    "TransformersGenerator",
    "VLLMGenerator",
    "build_messages",
    "build_prompt",
    "evaluate",
    "fixture_path",
    "gsm8k_gold",
    "is_char_tokenizer",
    "load_benchmark",
    "load_model",
    "load_tokenizer",
    "make_generator",
    "markdown_table",
    "mean_at_k",
    "pass_at_k",
    "per_problem_accuracy",
    "read_responses",
    "read_rows",
    "standard_error",
    "summarize_correctness",
]
