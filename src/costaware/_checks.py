"""Argument checks shared by every public function, and the one exception rule they apply.

The rule (applied by every public function of distributions, theory, alias, subset, sampler and
grpo.advantages):

* **ValueError** for any bad *value*, with a message that names the argument and shows the value:
  out of range, NaN or ±inf, complex, bool where a number is meant, a non-integral number where an
  integer is meant, wrong shape, mismatched lengths, empty where data is needed, non-numeric
  entries, and results that would overflow float64.
* **TypeError** only for a wrong *container*: ``None``, a string, a dict, a set or another object
  that is not array-like where an array is expected.

Numbers: an integer argument accepts ``int``, numpy integer scalars (``np.int64(2)``) and integral
floats (``2.0`` → 2); it rejects ``2.5``, ``nan``, ``inf``, ``True``. A real argument accepts
``int``, ``float``, numpy integer/float scalars and 0-d arrays or tensors holding one. Arrays are
converted to float64; complex arrays are rejected rather than silently losing the imaginary part.
Each check fails at the call site, never as a NaN further down.

``strict=True`` (records and config fields, which are kept as given and written to JSON): only a Python
``int`` (for a real, an ``int`` or ``float``) is accepted, so no numpy scalar or tensor is stored.

These are the package's only argument checks: a module needing a new kind of check adds it here.

Check once, at the public edge: a public function checks its arguments and then calls a kernel (a
``name_kernel`` function or a numba ``@njit``) that takes checked inputs and checks nothing again.
``plan_minibatches`` checks its pool once and runs the distribution, weight, alias and draw kernels on
it (it used to validate the same p five times). Counts that size an array or a loop have upper bounds
(``MAX_STEPS``, ``MAX_DRAWS``, ``MAX_COMPONENTS``), so a huge count is a ValueError, not a hang or a
MemoryError.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping, Set, Sized
from typing import Any

import numpy as np

_MAX_INT = int(np.iinfo(np.int64).max)


def show(x: Any) -> str:
    try:
        s = np.array2string(np.asarray(x), threshold=8, edgeitems=3) if np.ndim(x) else repr(x)
    except Exception:  # an object numpy cannot even look at
        s = repr(x)
    return s if len(s) < 200 else s[:200] + "..."


def unwrap(x: Any) -> Any:
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch.Tensor without importing torch
        x = x.detach().cpu().numpy()
    return x


def is_array_like(x: Any) -> bool:
    """False for what is never an array or a list of values: None, a string, bytes, a mapping or a set."""
    return not (x is None or isinstance(x, (str, bytes, Mapping, Set)))


def check_container(x: Any, name: str, what: str = "an array-like of numbers", *, needs: str = "") -> None:
    """The container rule, the one TypeError of the package: ``x`` must be :func:`is_array_like` (and, with
    ``needs``, e.g. ``"__iter__"`` or ``"__len__"``, have that method); ``what`` says what ``name`` must be."""
    if not is_array_like(x) or (needs and not hasattr(x, needs)):
        raise TypeError(f"{name} must be {what}, got {show(x)} ({type(x).__name__})")


def as_array(x: Any, name: str) -> np.ndarray:
    """``x`` as a real float64 array of any shape, entries unchecked for finiteness."""
    x = unwrap(x)
    check_container(x, name)
    try:
        raw = np.asarray(x)
    except (TypeError, ValueError) as exc:  # ragged nesting
        raise ValueError(f"{name} must be a rectangular array of numbers, got {show(x)}") from exc
    if raw.dtype == np.bool_:
        raise ValueError(f"{name} must hold numbers, not booleans, got {show(raw)}")
    if np.iscomplexobj(raw):
        raise ValueError(f"{name} must be real, got complex values {show(raw)}")
    try:
        return np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric, got {show(x)}") from exc


def as_vector(x: Any, name: str, *, allow_empty: bool = False, finite: bool = True) -> np.ndarray:
    """`x` as a finite 1-D float64 array (torch tensors and lists accepted); ``finite=False`` lets NaN
    and ±inf entries through (a measurement that failed)."""
    arr = as_array(x, name)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}: {show(arr)}")
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"{name} must not be empty, got {show(arr)}")
    if not finite:
        return arr
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must be finite, got {arr[i]} at index {i}")
    return arr


def positive_vector(x: Any, name: str) -> np.ndarray:
    arr = as_vector(x, name)
    bad = arr <= 0
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must be > 0, got {arr[i]} at index {i}")
    return arr


def nonnegative_vector(x: Any, name: str, *, not_all_zero: bool = False, allow_empty: bool = False) -> np.ndarray:
    arr = as_vector(x, name, allow_empty=allow_empty)
    bad = arr < 0
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must be >= 0, got {arr[i]} at index {i}")
    if not_all_zero and not (arr > 0).any():
        raise ValueError(f"{name} must have at least one entry > 0, got all zeros (length {arr.size})")
    return arr


def probability_vector(p: Any, name: str = "p", *, atol: float = 1e-8) -> np.ndarray:
    arr = nonnegative_vector(p, name, not_all_zero=True)
    total = arr.sum()
    if abs(total - 1.0) > atol * max(1, arr.size):
        raise ValueError(f"{name} must sum to 1, got sum {total!r}")
    return arr


def unit_array(x: Any, name: str) -> np.ndarray:
    """``x`` as a float64 array of any shape whose entries all lie in [0, 1] (rates, probabilities)."""
    arr = as_array(x, name)
    if not (np.isfinite(arr).all() and (arr >= 0).all() and (arr <= 1).all()):
        raise ValueError(f"{name} must lie in [0, 1], got {show(arr)}")
    return arr


def index_vector(x: Any, n: int, name: str, *, integral_floats: bool = False) -> np.ndarray:
    """``x`` flattened to a 1-D int64 array of indices in [0, n); [] (any dtype) is the empty array.

    An integer dtype is required, unless ``integral_floats`` (then 2.0 is index 2, 2.5 is refused).
    """
    if integral_floats:
        a = as_array(x, name).reshape(-1)
        if not ((a == np.round(a)).all() and (a >= 0).all() and (a < n).all()):
            raise ValueError(f"{name} must be integers in [0, {n}), got {show(a)}")
        return a.astype(np.int64)
    check_container(x, name, "an array-like of integers")
    idx = np.asarray(unwrap(x)).reshape(-1)
    if idx.size == 0:
        return np.empty(0, dtype=np.int64)
    if not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"{name} must be integers in [0, {n}), got dtype {idx.dtype}: {show(idx)}")
    if idx.min() < 0 or idx.max() >= n:
        raise ValueError(f"{name} must be integers in [0, {n}), got range [{idx.min()}, {idx.max()}]")
    return idx.astype(np.int64, copy=False)


def norms_and_costs(G: Any, c: Any) -> tuple[np.ndarray, np.ndarray]:
    """Gradient norms G >= 0 (not all zero) and costs c > 0, finite 1-D arrays of one length."""
    G = nonnegative_vector(G, "G", not_all_zero=True)
    c = positive_vector(c, "c")
    same_length(G=G, c=c)
    return G, c


def same_length(**arrays: Sized) -> int:
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError("mismatched lengths: " + ", ".join(f"{k}={n}" for k, n in lengths.items()))
    return next(iter(lengths.values()))


# -- scalars ------------------------------------------------------------------------------------


def is_real_number(x: Any) -> bool:
    """``x`` is a finite ``int`` or ``float`` (not a bool): a number as a record or config field holds it."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def real_scalar(x: Any, name: str, *, strict: bool = False, allow_inf: bool = False) -> float:
    """A finite real number as float: rejects bool, complex, None, strings, nan and ±inf (ValueError).

    ``allow_inf``: ±inf passes (nan never does); ``strict``: only an ``int`` or ``float``.
    """
    if strict and not (isinstance(x, (int, float)) and not isinstance(x, bool)):
        raise ValueError(f"{name} must be a finite number (int or float), got {x!r} ({type(x).__name__})")
    v = unwrap(x)
    if isinstance(v, np.ndarray) and v.ndim == 0:
        v = v[()]
    ok = isinstance(v, (numbers.Real, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
    if not ok:
        raise ValueError(f"{name} must be a real number, got {show(x)} ({type(x).__name__})")
    f = float(v)
    if not (np.isfinite(f) or (allow_inf and np.isinf(f))):
        raise ValueError(f"{name} must be finite, got {f!r}")
    return f


def integer(
    x: Any, name: str, *, minimum: int | None = None, maximum: int | None = None, strict: bool = False, why: str = ""
) -> int:
    """An integer as int: accepts int, numpy integers and integral floats (2.0); ValueError otherwise.

    ``strict``: only a Python ``int`` (not a bool, a float or a numpy integer). ``why`` (e.g. ``" or None"``
    where the caller lets None through) follows the bounds in the message."""
    if minimum == 1:
        desc = "a positive integer"
    elif minimum == 0:
        desc = "a non-negative integer"
    else:
        desc = "an integer" if minimum is None else f"an integer >= {minimum}"
    if maximum is not None:
        desc += f" of at most {maximum}"
    desc += why
    v = unwrap(x)
    if isinstance(v, np.ndarray) and v.ndim == 0:
        v = v[()]
    if (
        isinstance(v, (bool, np.bool_))
        or not isinstance(v, (numbers.Real, np.integer, np.floating))
        or (strict and not isinstance(x, int))
    ):
        raise ValueError(f"{name} must be {desc}, got {show(x)} ({type(x).__name__})")
    if isinstance(v, (int, np.integer)):
        i = int(v)
    else:
        f = float(v)
        if not (np.isfinite(f) and f.is_integer()):
            raise ValueError(f"{name} must be {desc}, got {x!r}")
        i = int(f)
    lo = -_MAX_INT if minimum is None else minimum
    hi = _MAX_INT if maximum is None else maximum
    if not lo <= i <= hi:
        raise ValueError(f"{name} must be {desc}, got {x!r}")
    return i


def boolean(x: Any, name: str) -> bool:
    if not isinstance(x, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {show(x)} ({type(x).__name__})")
    return bool(x)


def string_or_integer(x: Any, name: str) -> str:
    """A non-blank ``str`` or a Python ``int`` (not a bool), as ``str``: an id a record may give either way."""
    if (isinstance(x, str) and x.strip()) or (isinstance(x, int) and not isinstance(x, bool)):
        return str(x)
    raise ValueError(f"{name} must be a non-empty string or an integer, got {show(x)} ({type(x).__name__})")


def nonempty_string(x: Any, name: str) -> str:
    if not isinstance(x, str) or not x:
        raise ValueError(f"{name} must be a non-empty string, got {x!r}")
    return x


def file_path(x: Any, name: str) -> str:
    """A file path (``str`` or ``os.PathLike``) as ``str``; TypeError for anything else."""
    if not isinstance(x, (str, os.PathLike)):
        raise TypeError(f"{name} must be a file path (str or os.PathLike), got {type(x).__name__}")
    return os.fspath(x)


def in_interval(x: Any, name: str, low: float, high: float, *, strict: bool = False, open_high: bool = False) -> float:
    """A finite real in the closed interval [low, high] (``open_high``: in [low, high))."""
    v = real_scalar(x, name, strict=strict)
    if not (low <= v < high if open_high else low <= v <= high):
        raise ValueError(f"{name} must lie in [{low:g}, {high:g}{')' if open_high else ']'}, got {v!r}")
    return v


def in_unit_interval(x: Any, name: str, *, strict: bool = False) -> float:
    return in_interval(x, name, 0.0, 1.0, strict=strict)


def in_open_unit_interval(x: Any, name: str, *, why: str = "") -> float:
    """A real strictly between 0 and 1; ``why`` (e.g. ``" (a pass rate)"``) follows the bounds in the message."""
    v = real_scalar(x, name)
    if not 0.0 < v < 1.0:
        raise ValueError(f"{name} must lie in (0, 1){why}, got {v!r}")
    return v


def positive_scalar(
    x: Any, name: str, *, allow_zero: bool = False, allow_inf: bool = False, strict: bool = False
) -> float:
    """A real > 0 (``allow_zero``: >= 0), finite unless ``allow_inf`` (then +inf passes)."""
    v = real_scalar(x, name, strict=strict, allow_inf=allow_inf)
    if not (v >= 0 if allow_zero else v > 0):
        finite = " (inf allowed)" if allow_inf else " and finite"
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}{finite}, got {v!r}")
    return v


# A generated token's cost in PO tokens is a price ratio (1/3 by FLOPs; a few on memory-bound GPUs): above a
# million it is no real price, and total costs (tokens × it) would head for overflow before any plot is drawn.
MAX_GENERATION_COST = 1e6


def generation_cost(x: Any, name: str = "generation_cost", *, strict: bool = False) -> float:
    """A generated token's cost in PO tokens: a finite real in [0, ``MAX_GENERATION_COST``] (0: generation is
    free). The one rule of every config, option and report that takes it; ``strict`` as in :func:`real_scalar`."""
    why = (
        f"must be a finite number >= 0 and <= {MAX_GENERATION_COST:g} (a generated token's cost in PO tokens; "
        "more than a million is not a real price)"
    )
    try:
        v = real_scalar(x, name, strict=strict)
    except ValueError:
        raise value_error(name, x, why) from None
    if not 0.0 <= v <= MAX_GENERATION_COST:
        raise value_error(name, x, why)
    return v


def writable_file(x: Any, name: str) -> str:
    """A path a file can be written to, checked before the work whose result it will hold (ValueError: a
    folder, a missing folder, or no permission); a file that was not there is not left behind."""
    path = file_path(x, name)
    if os.path.isdir(path):
        raise ValueError(f"{name} must name a file to write, got {path!r}, which is a folder")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ValueError(f"{name} must name a file in an existing folder, got {path!r} ({parent!r} is not a folder)")
    existed = os.path.exists(path)
    try:
        with open(path, "a", encoding="utf-8"):  # append: an existing file is left as it is
            pass
    except OSError as exc:
        raise ValueError(f"{name} must name a file that can be written, got {path!r}: {exc.strerror}") from None
    if not existed:
        os.remove(path)
    return path


def value_error(name: str, value: Any, why: str) -> ValueError:
    """``ValueError("<name> <why>, got <value!r>")``: the message shape of every check here."""
    return ValueError(f"{name} {why}, got {value!r}")


def finite_result(value: float, what: str, inputs: str) -> float:
    """``value`` if finite, else ValueError: the true result does not fit in float64."""
    if not np.isfinite(value):
        raise ValueError(f"{what} overflows float64 for {inputs}")
    return float(value)


def pow2_exponent(x: np.ndarray) -> int:
    """e with max|x| in [2^(e-1), 2^e) (0 if x is all zero). ``np.ldexp(x, -e)`` is then exact, so
    scaled formulas give bit-identical results on moderate inputs and no overflow on extreme ones."""
    m = float(np.max(np.abs(x))) if x.size else 0.0
    if m == 0.0 or not np.isfinite(m):
        return 0
    return int(np.frexp(m)[1])


def log_sum_exp(logs: np.ndarray) -> float:
    """log Σ exp(logs), stable; -inf for an empty or all -inf input."""
    if logs.size == 0:
        return -np.inf
    m = float(np.max(logs))
    if m == -np.inf:
        return -np.inf
    return m + float(np.log(np.sum(np.exp(logs - m))))


def as_generator(rng: Any, name: str = "rng") -> np.random.Generator:
    """``np.random.default_rng(rng)`` for a Generator, a SeedSequence, None or a seed integer >= 0."""
    if rng is None or isinstance(rng, (np.random.Generator, np.random.SeedSequence, np.random.BitGenerator)):
        return np.random.default_rng(rng)
    return np.random.default_rng(integer(rng, name, minimum=0))
