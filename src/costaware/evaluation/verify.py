"""Answer extraction and checking with math-verify (``parse`` + ``verify``).

The gold answer is parsed as LaTeX inside ``\\boxed{...}`` (what MATH500's ``answer`` field and the
AIME/AMC numbers need), and, when that gives no sympy object, also as a plain expression (so
``10\\%`` still yields 10). A response is parsed with LaTeX extraction first, ``\\boxed{}`` having
top priority, then a plain expression; with ``require_boxed=True`` only a ``\\boxed{}`` answer or an
explicit "final answer is ..." phrase counts, never a stray last number. A response with nothing to
extract is wrong.

math-verify guards ``parse``/``verify`` with ``signal.alarm`` timeouts, which only work in the main
thread (elsewhere it raises ``ValueError``). :class:`MathVerifier` uses the timeouts in the main
thread and turns them off in any other thread (math-verify's own advice), so it can be called from
worker threads, e.g. a reward function inside a trainer.

>>> v = MathVerifier()
>>> v("so the answer is \\\\boxed{\\\\frac12}", "0.5")
True
>>> v("no idea", "0.5")
False
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from costaware._checks import integer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    """Whether a response was correct, and what answer (as text) was extracted from it, if any."""

    correct: bool
    extracted: str | None


def _is_sympy(x: Any) -> bool:
    return not isinstance(x, str)


class MathVerifier:
    """Checks model responses against gold answers with math-verify; gold parses are cached.

    Parameters
    ----------
    require_boxed:
        Only accept an answer in ``\\boxed{}`` (or after a "final answer is" phrase); otherwise the
        last mathematical expression in the response is used when no boxed answer is found.
    timeout_seconds:
        math-verify's per-parse and per-comparison timeout, in whole seconds, applied in the main
        thread only (see module docstring). ``None`` turns it off everywhere.
    float_rounding:
        Decimal places numbers are rounded to before comparison (math-verify's ``float_rounding``).
    """

    def __init__(self, *, require_boxed: bool = False, timeout_seconds: int | None = 5, float_rounding: int = 6):
        if timeout_seconds is not None:
            timeout_seconds = integer(timeout_seconds, "timeout_seconds", minimum=1, strict=True, why=" or None")
        float_rounding = integer(float_rounding, "float_rounding", minimum=0, strict=True)
        self.require_boxed = require_boxed
        self.timeout_seconds = timeout_seconds
        self.float_rounding = float_rounding
        anchorless = not require_boxed
        self._pred_config = (
            LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=anchorless),
            ExprExtractionConfig(try_extract_without_anchor=anchorless),
        )
        self._gold_latex = (LatexExtractionConfig(boxed_match_priority=0),)
        self._gold_expr = (ExprExtractionConfig(),)
        self._gold_cache: dict[str, list[Any]] = {}
        self._lock = threading.Lock()

    def config(self) -> dict[str, Any]:
        import math_verify

        return {
            "verifier": "math-verify",
            "math_verify_version": getattr(math_verify, "__version__", _dist_version("math-verify")),
            "require_boxed": self.require_boxed,
            "timeout_seconds": self.timeout_seconds,
            "float_rounding": self.float_rounding,
        }

    def _timeout(self) -> int | None:
        # signal.alarm only works in the main thread; elsewhere math-verify would raise ValueError
        return self.timeout_seconds if threading.current_thread() is threading.main_thread() else None

    def parse_gold(self, gold: str) -> list[Any]:
        """math-verify parses of a gold answer (LaTeX in ``\\boxed{}``, plus a plain parse if needed)."""
        if not isinstance(gold, str) or not gold.strip():
            raise ValueError(f"gold must be a non-empty string, got {gold!r}")
        with self._lock:
            cached = self._gold_cache.get(gold)
        if cached is not None:
            return cached
        timeout = self._timeout()
        parsed = list(parse(f"\\boxed{{{gold}}}", self._gold_latex, parsing_timeout=timeout))
        if not any(_is_sympy(x) for x in parsed):
            parsed += parse(gold, self._gold_expr, parsing_timeout=timeout)
        if not parsed:  # unparseable: math-verify still compares strings
            parsed = [gold.strip()]
        with self._lock:
            self._gold_cache[gold] = parsed
        return parsed

    def extract(self, response: str) -> list[Any]:
        """math-verify's parse of a response (empty when it holds no answer)."""
        if not isinstance(response, str):
            raise ValueError(f"response must be a string, got {type(response).__name__}")
        return list(parse(response, self._pred_config, parsing_timeout=self._timeout()))

    def check(self, response: str, gold: str) -> Verdict:
        """Verdict for one response: correct iff math-verify finds the extracted answer equal to gold."""
        gold_parsed = self.parse_gold(gold)
        pred = self.extract(response)
        if not pred:
            return Verdict(False, None)
        # math-verify puts the extracted text last (after the sympy object) in its parse result
        extracted = next((x for x in reversed(pred) if isinstance(x, str)), str(pred[0]))
        ok = verify(gold_parsed, pred, float_rounding=self.float_rounding, timeout_seconds=self._timeout())
        return Verdict(bool(ok), extracted)

    def __call__(self, response: str, gold: str) -> bool:
        return self.check(response, gold).correct


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None
