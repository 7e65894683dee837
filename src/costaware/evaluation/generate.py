"""Sampling k responses per prompt: vLLM when it is installed (GPU), transformers otherwise.

A *generate function* is any callable ``fn(prompts, k) -> list[list[str | Completion]]`` that returns k
responses for each prompt; :func:`costaware.evaluation.evaluate` takes one. Two are provided:

* :class:`TransformersGenerator`: batched ``model.generate`` with left padding and
  ``num_return_sequences=k``; runs on CPU (tests, tiny models) or GPU.
* :class:`VLLMGenerator`: vLLM's ``LLM.generate`` with ``SamplingParams(n=k)``. vLLM is not installed
  on the CPU machines this project is developed on, so this path is guarded and has not been run here.

Both seed every call from ``(seed, prompts)`` (transformers) or ``(seed, prompt)`` (vLLM), so a
problem gets the same samples whether a run is fresh or resumed.

Checkpoints saved with a character tokenizer from :mod:`costaware.tiny` are detected and loaded with
:func:`costaware.tiny.load_char_tokenizer`: ``AutoTokenizer`` would pick ``Qwen2Tokenizer`` next to a
Qwen2 config and drop spaces and newlines.

>>> tok, model = load_tokenizer("ckpt"), load_model("ckpt")          # doctest: +SKIP
>>> gen = TransformersGenerator(model, tok, max_new_tokens=512)       # doctest: +SKIP
>>> gen(["What is 1+1?"], k=4)[0][0].text                             # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from costaware._checks import integer, positive_scalar, real_scalar

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Completion:
    """One sampled response and the number of tokens generated for it (its cost)."""

    text: str
    num_tokens: int | None = None


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling settings shared by both engines. ``temperature=0`` means greedy decoding."""

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 0  # 0: no top-k cut (transformers); vLLM's equivalent is -1
    max_new_tokens: int = 2048
    seed: int = 0

    def __post_init__(self) -> None:
        # frozen: store the checked, plain-Python values (np.int64(2) → 2)
        temperature = positive_scalar(self.temperature, "temperature", allow_zero=True)
        object.__setattr__(self, "temperature", temperature)
        top_p = real_scalar(self.top_p, "top_p")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p!r}")
        object.__setattr__(self, "top_p", top_p)
        for name in ("top_k", "max_new_tokens", "seed"):
            object.__setattr__(self, name, integer(getattr(self, name), name))
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k!r}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def derived_seed(seed: int, *parts: str) -> int:
    """A 31-bit seed from ``seed`` and text parts (stable across runs and Python processes)."""
    h = hashlib.sha256(str(seed).encode())
    for part in parts:
        h.update(b"\x00" + part.encode("utf-8"))
    return int.from_bytes(h.digest()[:4], "little") & 0x7FFFFFFF


# ----------------------------------------------------------------------------------------------- loading


def is_char_tokenizer(path: str | Path) -> bool:
    """True when ``path`` holds a tokenizer saved from :func:`costaware.tiny.char_tokenizer`.

    Such a tokenizer is a ``tokenizers`` WordLevel model that splits text into single characters;
    real LLM tokenizers are BPE/Unigram/WordPiece.
    """
    file = Path(path) / "tokenizer.json"
    if not file.is_file():
        return False
    try:
        spec = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    model_type = (spec.get("model") or {}).get("type")
    pre = json.dumps(spec.get("pre_tokenizer") or {})
    return model_type == "WordLevel" and "[\\\\s\\\\S]" in pre


def load_tokenizer(path: str | Path) -> Any:
    """The tokenizer saved at ``path``, character tokenizers included (see :func:`is_char_tokenizer`)."""
    path = Path(path)
    if not path.exists():
        raise ValueError(
            f"model path {str(path)!r} does not exist (hub ids cannot be fetched here: use a local folder)"
        )
    if is_char_tokenizer(path):
        from costaware.tiny import load_char_tokenizer

        return load_char_tokenizer(str(path))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_model(path: str | Path, *, device: str | None = None, dtype: str = "auto") -> Any:
    """A causal LM from a local folder, in eval mode, on ``device`` (default: cuda if present, else cpu).

    ``dtype`` is ``"auto"`` (the checkpoint's dtype on GPU, float32 on CPU), or a torch dtype name.
    """
    import torch
    from transformers import AutoModelForCausalLM

    path = Path(path)
    if not path.exists():
        raise ValueError(
            f"model path {str(path)!r} does not exist (hub ids cannot be fetched here: use a local folder)"
        )
    device = device or default_device()
    if dtype == "auto":
        torch_dtype: Any = "auto" if device.startswith("cuda") else torch.float32
    else:
        torch_dtype = getattr(torch, dtype, None)
        if not isinstance(torch_dtype, torch.dtype):
            raise ValueError(f"dtype must be 'auto' or a torch dtype name such as 'bfloat16', got {dtype!r}")
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype)
    return model.to(device).eval()  # type: ignore[arg-type]  # transformers' stubs type .to's self as its first arg


# ---------------------------------------------------------------------------------------- transformers


class TransformersGenerator:
    """k samples per prompt with ``model.generate``: batched, left-padded, ``num_return_sequences=k``.

    ``batch_size`` caps the sequences in one ``generate`` call: ``batch_size // k`` prompts go together,
    and when k > batch_size a prompt's k samples are drawn in several calls. Each call is seeded from
    ``(seed, its prompts)`` inside ``torch.random.fork_rng``, so the caller's RNG state is untouched.
    """

    def __init__(self, model: Any, tokenizer: Any, sampling: SamplingConfig | None = None, *, batch_size: int = 32):
        batch_size = integer(batch_size, "batch_size", minimum=1, strict=True)
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingConfig()
        self.batch_size = batch_size
        self.engine = "transformers"
        eos = getattr(model.generation_config, "eos_token_id", None)
        if eos is None:
            eos = tokenizer.eos_token_id
        self.eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (self.eos_ids or [0])[0]

    def preferred_chunk(self, k: int) -> int:
        """Prompts that fill one ``generate`` batch at k samples each (:func:`evaluate` groups by it)."""
        return max(1, self.batch_size // min(k, self.batch_size))

    def _generate(self, prompts: Sequence[str], n: int, seed: int) -> list[list[Completion]]:
        import torch

        tok = self.tokenizer
        enc = tok(
            list(prompts),
            return_tensors="pt",
            padding=True,
            padding_side="left",
            add_special_tokens=not getattr(tok, "chat_template", None),  # templates add their own BOS
        )
        device = next(self.model.parameters()).device
        enc = {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
        s = self.sampling
        greedy = s.temperature == 0
        kwargs: dict[str, Any] = {
            "max_new_tokens": s.max_new_tokens,
            "pad_token_id": self.pad_id,
            "eos_token_id": self.eos_ids or None,
        }
        if greedy:  # one greedy decode, replicated: HF refuses num_return_sequences > 1 without beams
            kwargs.update(do_sample=False, num_return_sequences=1, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(
                do_sample=True,
                num_return_sequences=n,
                temperature=s.temperature,
                top_p=s.top_p,
                top_k=s.top_k,
            )
        devices = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.inference_mode():
            torch.manual_seed(seed)
            out = self.model.generate(**enc, **kwargs)
        new = out[:, enc["input_ids"].shape[1] :]
        if greedy:
            new = new.repeat_interleave(n, dim=0)
        # generated length = up to and including the first EOS (the rest is padding)
        is_eos = (
            torch.isin(new, torch.tensor(self.eos_ids, device=new.device))
            if self.eos_ids
            else torch.zeros_like(new, dtype=torch.bool)
        )
        has_eos = is_eos.any(dim=1)
        first = is_eos.int().argmax(dim=1)
        lengths = torch.where(has_eos, first + 1, torch.full_like(first, new.shape[1])).tolist()
        texts = tok.batch_decode(new, skip_special_tokens=True)
        flat = [Completion(t, int(n_tok)) for t, n_tok in zip(texts, lengths, strict=True)]
        return [flat[i * n : (i + 1) * n] for i in range(len(prompts))]

    def __call__(self, prompts: Sequence[str], k: int) -> list[list[Completion]]:
        k = integer(k, "k", minimum=1, strict=True)
        prompts = list(prompts)
        results: list[list[Completion]] = [[] for _ in prompts]
        per_call = min(k, self.batch_size)
        prompts_per_call = max(1, self.batch_size // per_call)
        for start in range(0, len(prompts), prompts_per_call):
            group = prompts[start : start + prompts_per_call]
            for part, done in enumerate(range(0, k, per_call)):
                n = min(per_call, k - done)
                seed = derived_seed(self.sampling.seed, str(part), *group)
                for i, comps in enumerate(self._generate(group, n, seed)):
                    results[start + i].extend(comps)
        return results


# ------------------------------------------------------------------------------------------------ vLLM


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


class VLLMGenerator:
    """k samples per prompt with vLLM (``SamplingParams(n=k)``, one seed per prompt). Needs a GPU.

    Not run on this project's CPU machines (vLLM is not installed there); the calls follow vLLM's
    documented offline API: ``LLM(model=..., seed=...)``, ``LLM.generate(prompts, sampling_params)``,
    ``RequestOutput.outputs[j].text`` / ``.token_ids``.
    """

    def __init__(
        self,
        model_path: str | Path,
        sampling: SamplingConfig | None = None,
        *,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        dtype: str = "auto",
        max_model_len: int | None = None,
        chunk_size: int = 256,
    ):
        try:
            from vllm import LLM, SamplingParams
        except ImportError as err:
            raise ImportError(
                "vLLM is not installed; install it on a GPU machine (pip install vllm) or use --engine transformers"
            ) from err
        if is_char_tokenizer(model_path):
            raise ValueError(
                f"{model_path} holds a costaware.tiny character tokenizer, which vLLM would load as the wrong "
                "tokenizer; use the transformers engine"
            )
        self.sampling = sampling or SamplingConfig()
        self._params_cls = SamplingParams
        self._chunk_size = chunk_size
        self.engine = "vllm"
        self.llm = LLM(
            model=str(model_path),
            seed=self.sampling.seed,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            dtype=dtype,
            max_model_len=max_model_len,
        )

    def preferred_chunk(self, k: int) -> int:
        """Prompts per ``LLM.generate`` call: large, so vLLM can batch; results are saved after each."""
        return self._chunk_size

    def __call__(self, prompts: Sequence[str], k: int) -> list[list[Completion]]:
        s = self.sampling
        params = [
            self._params_cls(
                n=k,
                temperature=s.temperature,
                top_p=s.top_p if s.temperature > 0 else 1.0,
                top_k=s.top_k if s.top_k > 0 else -1,
                max_tokens=s.max_new_tokens,
                seed=derived_seed(s.seed, p),
            )
            for p in prompts
        ]
        outputs = self.llm.generate(list(prompts), params, use_tqdm=False)
        return [[Completion(o.text, len(o.token_ids)) for o in out.outputs] for out in outputs]


def make_generator(
    model_path: str | Path,
    sampling: SamplingConfig,
    *,
    engine: str = "auto",
    device: str | None = None,
    dtype: str = "auto",
    batch_size: int = 32,
    tokenizer: Any = None,
    **vllm_kwargs: Any,
) -> TransformersGenerator | VLLMGenerator:
    """The generator for ``engine``: ``vllm``, ``transformers``, or ``auto`` (vLLM when installed, a GPU is
    present and the checkpoint is not a character-tokenizer toy; transformers otherwise)."""
    if engine not in ("auto", "vllm", "transformers"):
        raise ValueError(f"engine must be 'auto', 'vllm' or 'transformers', got {engine!r}")
    if engine == "auto":
        use_vllm = vllm_available() and default_device() == "cuda" and not is_char_tokenizer(model_path)
        engine = "vllm" if use_vllm else "transformers"
    if engine == "vllm":
        return VLLMGenerator(model_path, sampling, dtype=dtype, **vllm_kwargs)
    tok = tokenizer if tokenizer is not None else load_tokenizer(model_path)
    model = load_model(model_path, device=device, dtype=dtype)
    return TransformersGenerator(model, tok, sampling, batch_size=batch_size)
