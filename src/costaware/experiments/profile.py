"""What one `costaware reproduce` runs: the :class:`Profile` (sizes, built by keyword) and its runs.

A profile's fields come in groups (``Profile.help()`` prints them); the named profiles ``quick``,
``default`` and ``full`` are keyword constructions over the defaults, so a reader sees only what
differs. :func:`costaware.experiments.specs.run_specs` turns a profile into the runs to train.

>>> Profile(eval_k=0)
Traceback (most recent call last):
...
ValueError: eval_k must be a positive integer, got 0
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from costaware._checks import generation_cost as check_generation_cost
from costaware._checks import integer, is_real_number, positive_scalar, value_error
from costaware.experiments.arms import Arm
from costaware.experiments.tasks import TASKS, describe_sizes, split_task_id
from costaware.sampling_options import PROXIES

# The headline methods, by registry id (grpo.plan.METHODS): GRPO, nonzero (GRPO's rows with A != 0,
# renormalised: the effective-step control), p* (centred weights), p* with raw weights (GRPO's expected
# step), p*_smooth(0.01) and PODS. ("p_star", "raw") is p* with raw weights.
HEADLINE: tuple[tuple[str, str], ...] = (
    ("none", "centred"), ("nonzero", "centred"), ("p_star", "centred"), ("p_star", "raw"),
    ("p_smooth", "centred"), ("pods", "centred"),
)  # fmt: skip
GROUPS = ("headline", "lr_sweep", "zvf", "cispo", "dapo", "proxy", "long", "ablation", "control", "rollout", "support")
# The prompt-stage comparison (group "rollout", a finite train set reused over epochs): (row method, prompt
# stage) per arm. The default holds what its verdicts need: GRPO, its zero-advantage filter, the two peers that
# act before PO (GRESO's skip, DAPO's dynamic sampling) and the cost-aware skip with p* rows; "full" adds p*
# and the row-level peers on the same train set, GRESO with p* rows and the unbiased cost-aware prompts.
ROLLOUT_ARMS: dict[str, tuple[tuple[str, str], ...]] = {
    "off": (),
    "default": (
        ("none", "all"),
        ("nonzero", "all"),
        ("none", "greso"),
        ("none", "dapo"),
        ("p_star", "cost_aware_skip"),
    ),
}
ROLLOUT_ARMS["full"] = ROLLOUT_ARMS["default"] + (
    ("p_star", "all"),
    ("pods", "all"),
    ("cost_pods", "all"),
    ("p_star", "greso"),
    ("p_star", "cost_aware"),
)
# The long-budget runs: is the saving only "sooner", or a higher plateau? GRPO, its effective-step
# control and p*, at long_budget x the token budget, with the headline's seeds.
LONG_ARMS = ("none", "nonzero", "p_star")
# The settings with a token-sum loss: GRPO, nonzero, p* with the calibrated proxy (what 'auto'
# resolves to for these losses) and p* with the paper's |A| proxy, so the proxy's effect is measured.
TOKEN_SUM_SETTINGS = ("cispo", "dapo")
PROXY_ARMS: tuple[tuple[str, str], ...] = (
    ("none", "auto"),
    ("nonzero", "auto"),
    ("p_star", "auto"),
    ("p_star", "advantage"),
)


# Profile.optimizer: the optimisers a run may use (experiments.grpo_run.OPTIMIZER_ARGS gives TRL's settings).
OPTIMIZERS = ("adamw", "sgd")
# The headline methods whose p reads the gradient-norm proxy (grpo.methods: uses_proxy): Profile.headline_proxy's.
PROXY_METHODS = ("p_star", "p_smooth")


def _opt(default: Any, group: str, help_: str, **kw: Any) -> Any:
    return field(default=default, metadata={"group": group, "help": help_}, **kw)


@dataclass(frozen=True)
class Profile:
    """Sizes of one reproduction, grouped as ``Profile.help()`` prints them.

    With ``token_budget > 0`` every run trains until its policy-optimisation (PO) tokens reach the
    budget, with ``rounds`` as a cap (a policy whose pools are all skipped still ends), and is evaluated
    ``eval_points`` times at equal token spacing. With ``token_budget == 0`` runs stop after ``rounds``
    and evaluate every ``eval_every`` rounds.
    """

    # policy
    hidden_size: int = _opt(64, "policy", "width of the tiny Qwen2")
    num_layers: int = _opt(2, "policy", "decoder layers")
    # task
    task: str = _opt("sort", "task", "task family of the headline (experiments.tasks registry)")
    second_task: str = _opt("", "task", "a second family the headline is also run on ('' = none)")
    min_size: int = _opt(2, "task", "smallest task size (terms / digits)")
    # the sizes' help also says what they mean for the profile's tasks (Profile.field_help)
    max_size: int = _opt(7, "task", "largest task size")
    second_max_size: int = _opt(6, "task", "largest size of the second task")
    extra_tasks: tuple[str, ...] = _opt(
        (),
        "task",
        "more tasks the headline is also run on, each a task id 'family:max_size', the family at sizes "
        "min_size..max_size (e.g. 'sort:9': 2..9 digits, prompt + response 6..62 tokens, a 10.3x spread)",
    )
    mistake_prob: float = _opt(0.1, "task", "per-step slip rate of the SFT demonstrations")
    # sft warm-up
    sft_steps: int = _opt(1000, "sft", "SFT steps of the shared warm-up")
    sft_batch: int = _opt(64, "sft", "SFT rows per step")
    sft_lr: float = _opt(3e-3, "sft", "SFT peak learning rate")
    control_lr: float = _opt(3e-4, "sft", "learning rate of the SFT-continuation control")
    # reinforcement learning
    rounds: int = _opt(400, "rl", "generation rounds per run; a cap when token_budget > 0")
    prompts_per_round: int = _opt(32, "rl", "prompts per generation round")
    generations: int = _opt(8, "rl", "completions per prompt (the group size)")
    steps_per_generation: int = _opt(2, "rl", "optimiser steps (mini-batches) per round")
    learning_rate: float = _opt(2e-4, "rl", "GRPO learning rate")
    warmup_rounds: int = _opt(5, "rl", "linear LR warm-up over this many generation rounds (the same for every method)")
    lr_sweep: tuple[float, ...] = _opt(
        (0.5, 2.0), "rl", "the LR sweep: GRPO (lr_sweep_arms) also at these multiples of the LR (x1 is the headline's)"
    )
    lr_sweep_arms: tuple[str, ...] = _opt(
        ("none",),
        "rl",
        "the headline arms (by key) that the LR sweep runs at lr_sweep's multiples, each with the headline's seeds; "
        "the report picks each swept arm's LR on the validation split",
    )
    optimizer: str = _opt(
        "adamw",
        "rl",
        "'adamw': TRL's AdamW (gradients clipped at norm 1); 'sgd': plain SGD, the theory's setting (a step "
        "−lr·ĝ: no momentum, no weight decay, no clipping; its LR is on another scale than AdamW's)",
    )
    loss_type: str = _opt("grpo", "rl", "TRL loss_type of the GRPO setting")
    pods_keep: int = _opt(5, "rl", "PODS rows kept per group")
    token_budget: int = _opt(300_000, "rl", "PO tokens every run spends (0: stop after rounds)")
    train_prompts: int = _opt(
        0,
        "rl",
        "a finite train set of this many prompts, reused over epochs as real RLVR sets "
        "are (0: fresh prompts every round, rounds x prompts_per_round of them)",
    )
    logprob_rows: str = _opt(
        "all",
        "rl",
        "rows whose old (and, with KL, reference) log-probs each round computes, the adapter's "
        "cost_aware_logprob_rows: 'all' every row, as stock TRL (the README's recorded runs), or 'fed' only the rows "
        "the plan feeds (the same values; saves the forward passes over the others: p* runs 14-18% shorter, README)",
    )
    generation: str = _opt(
        "kv",
        "rl",
        "rollout engine of training and evaluation: 'kv' the batched KV-cached sampler "
        "(costaware.generation; the same law as generate, about 3x its tokens/s here), 'transformers' model.generate "
        "(the engine of the runs recorded before 'kv': those keep their run keys)",
    )
    numeric_jitter: float = _opt(
        0.0,
        "rl",
        "relative noise multiplied into the SFT weights at the start of each GRPO run, seeded by the run's "
        "seed: 1e-6 is a few float32 ulps, what another processor's rounding does to a trained model (the "
        "numeric-perturbation check; 0: off)",
    )
    skipped_warn_rounds: int = _opt(5, "rl", "warn after this many consecutive rounds that fed no token")
    # evaluation
    eval_points: int = _opt(8, "eval", "evaluations at equal PO-token spacing (token budget)")
    eval_every: int = _opt(5, "eval", "evaluate every this many rounds (no token budget)")
    eval_prompts: int = _opt(320, "eval", "prompts of the reported held-out set")
    validation_prompts: int = _opt(96, "eval", "prompts of the validation split (LR choice), disjoint")
    eval_k: int = _opt(2, "eval", "samples per prompt (mean@k)")
    diagnostics_rows: int = _opt(16, "eval", "rows whose exact gradient norm is measured (0: off)")
    diagnostics_every: int = _opt(10, "eval", "measure those rows every this many generation rounds")
    mse_every: int = _opt(
        0,
        "eval",
        "every this many generation rounds, measure each step's squared error against the pool's expected step "
        "beside J's closed form of it, from every fed row's exact gradient (one backward per row with A != 0; "
        "the run's record holds them; 0: off)",
    )
    generation_cost: float = _opt(
        1 / 3, "eval",
        "cost of one generated token in PO tokens, for the total-cost axis. A PO token costs a forward and a "
        "backward pass (about 6N FLOPs for N parameters), a generated token one forward with a KV cache (2N): "
        "1/3. Decoding is memory-bound on GPUs, which makes it dearer per FLOP; pass your measured ratio.",
    )  # fmt: skip
    # runs
    seeds: tuple[int, ...] = _opt((0, 1, 2, 3, 4), "runs", "seeds of the headline and the LR sweep")
    long_budget: float = _opt(
        0.0,
        "runs",
        "also run GRPO, nonzero and p* at this multiple of token_budget and rounds (eval_points x up to 2) "
        "with the headline's seeds, so the plateau check has a baseline run to its plateau (0: off)",
    )
    setting_seeds: tuple[int, ...] = _opt(
        (),
        "runs",
        "seeds of GRPO+ZVF (GRPO, p*), of the CISPO and DAPO settings (GRPO, nonzero, p* with the "
        "calibrated and with the paper's proxy) and of p* with the calibrated proxy under the headline loss",
    )
    ablation_seeds: tuple[int, ...] = _opt((), "runs", "seeds of the ablations and the SFT control")
    rollout_arms: str = _opt(
        "default",
        "runs",
        "arms of the prompt-stage group, with the headline's seeds: 'off', 'default' (GRPO, "
        "nonzero, GRESO's skip, DAPO's dynamic sampling, the cost-aware skip with p* rows) or 'full' (those, p*, "
        "PODS and cost-aware PODS, GRESO with p* rows, cost-aware prompts with p* rows)",
    )
    rollout_train_prompts: int = _opt(512, "runs", "the prompt-stage group's finite train set, reused over epochs")
    headline_arms: tuple[str, ...] = _opt(
        (),
        "runs",
        "the headline's arms by key (none, nonzero, p_star, p_star:raw, p_smooth, pods); () = all of them",
    )
    headline_proxy: str = _opt(
        "auto",
        "runs",
        "the gradient-norm proxy of the headline's and the LR sweep's p* and p*_smooth arms (TRL's "
        "cost_aware_proxy): 'auto', 'advantage', 'length_aware', 'calibrated' or 'oracle' (every row's exact "
        "gradient norm, measured each round: an ablation, expensive)",
    )
    run_order: str = _opt(
        "task",
        "runs",
        "'task': each task's runs in turn; 'seed': seed by seed across the tasks, so that an interrupted job holds "
        "every task at the same seeds",
    )

    def __post_init__(self) -> None:
        ints = {"hidden_size": 8, "num_layers": 1, "min_size": 1, "max_size": 1, "second_max_size": 1, "sft_steps": 1,
                "sft_batch": 1, "rounds": 1, "warmup_rounds": 0, "prompts_per_round": 1, "generations": 2,
                "steps_per_generation": 1, "pods_keep": 1,
                "token_budget": 0, "skipped_warn_rounds": 1, "eval_points": 1, "eval_every": 1, "eval_prompts": 1,
                "validation_prompts": 0, "eval_k": 1, "diagnostics_rows": 0, "diagnostics_every": 1, "train_prompts": 0,
                "rollout_train_prompts": 1, "mse_every": 0}  # fmt: skip
        for name, low in ints.items():
            integer(getattr(self, name), name, minimum=low, strict=True)
        if not (is_real_number(self.numeric_jitter) and 0 <= self.numeric_jitter <= 1e-2):
            raise value_error("numeric_jitter", self.numeric_jitter, "must be a number in [0, 0.01]")
        if not (is_real_number(self.long_budget) and (self.long_budget == 0 or self.long_budget > 1)):
            raise value_error("long_budget", self.long_budget, "must be 0 (off) or a finite multiple > 1")
        for name in ("sft_lr", "control_lr", "learning_rate"):
            positive_scalar(getattr(self, name), name, strict=True)
        check_generation_cost(self.generation_cost, strict=True)  # one rule with the TRL and rollouts options
        if not 0.0 <= self.mistake_prob < 1.0:
            raise ValueError(f"mistake_prob must lie in [0, 1), got {self.mistake_prob!r}")
        for name in ("max_size", "second_max_size"):
            if getattr(self, name) < self.min_size:
                raise ValueError(f"{name} must be >= min_size={self.min_size}, got {getattr(self, name)!r}")
        if (self.prompts_per_round * self.generations) % self.steps_per_generation:
            raise ValueError(f"steps_per_generation must divide prompts_per_round x generations, "
                             f"got {self.steps_per_generation!r}")  # fmt: skip
        for name in ("seeds", "setting_seeds", "ablation_seeds"):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                raise value_error(name, value, "must be a tuple of integers >= 0")
            for s in value:
                integer(s, name, minimum=0, strict=True)
            if len(set(value)) != len(value):
                raise ValueError(f"{name} must not repeat a seed, got {value!r}")
        if not self.seeds:
            raise ValueError("seeds must hold at least one seed, got ()")
        if not isinstance(self.lr_sweep, tuple) or any(not (math.isfinite(m) and m > 0) for m in self.lr_sweep):
            raise ValueError(f"lr_sweep must be a tuple of finite multiples > 0, got {self.lr_sweep!r}")
        if not isinstance(self.task, str) or not self.task or not isinstance(self.second_task, str):
            raise ValueError(f"task must be a task family's name, got {self.task!r}")
        if self.generation not in ("kv", "transformers"):
            raise ValueError(f"generation must be 'kv' or 'transformers', got {self.generation!r}")
        if self.rollout_arms not in ROLLOUT_ARMS:
            raise ValueError(f"rollout_arms must be one of {tuple(ROLLOUT_ARMS)}, got {self.rollout_arms!r}")
        arm_keys = tuple(Arm(m, weights=w).key for m, w in HEADLINE)
        if not isinstance(self.headline_arms, tuple) or any(a not in arm_keys for a in self.headline_arms):
            raise value_error("headline_arms", self.headline_arms, f"must be a tuple of arm keys among {arm_keys}")
        if self.headline_arms and "none" not in self.headline_arms:
            raise value_error("headline_arms", self.headline_arms, "must hold 'none' (GRPO, the report's baseline)")
        if self.run_order not in ("task", "seed"):
            raise value_error("run_order", self.run_order, "must be 'task' or 'seed'")
        if not isinstance(self.lr_sweep_arms, tuple) or any(a not in arm_keys for a in self.lr_sweep_arms):
            raise value_error("lr_sweep_arms", self.lr_sweep_arms, f"must be a tuple of arm keys among {arm_keys}")
        if self.headline_arms and any(a not in self.headline_arms for a in self.lr_sweep_arms):
            raise value_error("lr_sweep_arms", self.lr_sweep_arms, f"must be among headline_arms {self.headline_arms}")
        if self.optimizer not in OPTIMIZERS:
            raise value_error("optimizer", self.optimizer, f"must be one of {OPTIMIZERS}")
        if self.headline_proxy not in ("auto", *PROXIES):
            raise value_error("headline_proxy", self.headline_proxy, f"must be one of {('auto', *PROXIES)}")
        if 0 < self.train_prompts < self.prompts_per_round or self.rollout_train_prompts < self.prompts_per_round:
            raise ValueError(
                f"train_prompts and rollout_train_prompts must hold at least prompts_per_round="
                f"{self.prompts_per_round} prompts, got {self.train_prompts!r} and {self.rollout_train_prompts!r}"
            )
        if self.logprob_rows not in ("all", "fed"):
            raise ValueError(f"logprob_rows must be 'all' or 'fed', got {self.logprob_rows!r}")
        if not isinstance(self.extra_tasks, tuple):
            raise ValueError(f"extra_tasks must be a tuple of task ids 'family:max_size', got {self.extra_tasks!r}")
        for task_id in self.extra_tasks:
            try:
                family, size = split_task_id(task_id)
            except ValueError:
                family, size = "", None
            if not family or size is None or size < self.min_size:
                raise ValueError(f"extra_tasks must hold task ids 'family:max_size' with max_size >= min_size="
                                 f"{self.min_size}, got {task_id!r}")  # fmt: skip
        if len(set(self.tasks())) != len(self.tasks()):
            raise ValueError(f"extra_tasks must not repeat a task, got {self.extra_tasks!r} (task {self.task!r}, "
                             f"second_task {self.second_task!r})")  # fmt: skip

    def sizes(self, task: str) -> tuple[int, int]:
        """(smallest, largest) task size of the task id ``task``: a ``family:max_size`` id carries its own
        largest size, and the second task has its own."""
        own = split_task_id(task)[1]
        if own is not None:
            return self.min_size, own
        top = self.second_max_size if task == self.second_task and task != self.task else self.max_size
        return self.min_size, top

    def tasks(self) -> tuple[str, ...]:
        """The task ids the headline runs on: the task, the second task, then the extra tasks."""
        return (self.task, *((self.second_task,) if self.second_task else ()), *self.extra_tasks)

    def field_help(self, name: str) -> str:
        """The help of field ``name``; for a largest size, with the sizes and token lengths it gives this
        profile's task (e.g. ``(sort: 2..7 digits, prompt + response 6..41 tokens)``)."""
        text = self.__dataclass_fields__[name].metadata["help"]
        tasks = {"max_size": (self.task,), "second_max_size": (self.second_task,), "extra_tasks": self.extra_tasks}
        known = [t for t in tasks.get(name, ()) if t and split_task_id(t)[0] in TASKS]
        if known:
            text += " (" + "; ".join(describe_sizes(t, *self.sizes(t)) for t in known) + ")"
        elif name == "second_max_size" and not self.second_task:
            text += " (no second task)"
        return text

    @classmethod
    def help(cls) -> str:
        """Every field with its default and help, by group."""
        default = cls()
        lines, group = [], None
        for f in dataclasses.fields(cls):
            if f.metadata["group"] != group:
                group = f.metadata["group"]
                lines.append(f"[{group}]")
            lines.append(f"  {f.name} = {f.default!r}: {default.field_help(f.name)}")
        return "\n".join(lines)


PROFILES: dict[str, Profile] = {
    # CI: the whole pipeline on the default task in under two minutes; its numbers mean nothing (its report
    # says so). Sort at 2..3 digits, where a 150-step SFT leaves a width-32 policy at 39% sampled accuracy and
    # a high LR lets GRPO raise it within the budget, so the report's comparison has a target above the start
    # (the round cap of 20 lets the arms that feed fewer rows per round spend most of the budget too).
    "quick": Profile(
        hidden_size=32,
        num_layers=1,
        max_size=3,
        sft_steps=150,
        sft_batch=32,
        sft_lr=1e-2,
        rounds=20,
        prompts_per_round=8,
        generations=4,
        pods_keep=2,
        learning_rate=2e-3,
        token_budget=3000,
        eval_points=4,
        eval_every=2,
        diagnostics_every=2,
        eval_prompts=48,
        validation_prompts=16,
        eval_k=2,
        seeds=(0,),
        lr_sweep=(2.0,),
        setting_seeds=(0,),
        warmup_rounds=0,
        rollout_train_prompts=40,
    ),  # fmt: skip
    # The headline decomposition on one task, 5 seeds, GRPO run to its plateau: 16 to 40 minutes on 2 cores
    # with the KV rollout engine (the README's runtime paragraph).
    "default": Profile(),
    # The default's runs (reused: same run keys) plus GRPO+ZVF, the CISPO and DAPO settings and the
    # calibrated proxy with 3 seeds, the ablations with 3 seeds, and the headline on the second task (arith)
    # on sort at 2..9 digits, a 10.3x spread of prompt + response lengths, and on sortcheck at 2..7 digits, whose
    # responses differ in length within a group (self-checks, rambles to the budget): where p*'s 1/sqrt(c) can
    # choose between a group's responses (the long group stays off: the default's own budget already runs GRPO
    # to its plateau).
    # The evidence profile: GRPO, nonzero, p*, p*_smooth(0.01) and PODS on sort (2..7 digits) and on sortcheck
    # (2..7 digits, a group's responses differ in length), 40 seeds, seed by seed across the two tasks so that an
    # interrupted job holds both at the same seeds (`--archive` keeps the finished runs where a new machine finds
    # them). No LR sweep (GRPO at its default rate is the control of every claim here) and no validation split
    # (nothing is chosen on it); old log-probs over the fed rows only (the same values, fewer forward passes).
    "settle": Profile(
        extra_tasks=("sortcheck:7",),
        headline_arms=("none", "nonzero", "p_star", "p_smooth", "pods"),
        run_order="seed",
        lr_sweep=(),
        validation_prompts=0,
        logprob_rows="fed",
        rollout_arms="off",
        seeds=tuple(range(40)),
    ),
    "full": Profile(
        second_task="arith",
        extra_tasks=("sort:9", "sortcheck:7"),
        setting_seeds=(0, 1, 2),
        ablation_seeds=(0, 1, 2),
        rollout_arms="full",
    ),
}
# The gap between J's predicted saving of p* over nonzero and the measured one (docs/design.md, "The gap between J
# and practice: the ablations"): each profile an arm pair, nonzero against p*, 20 seeds on sort, with GRPO as the
# report's baseline; every run records its step errors beside J's closed form. `gap`: AdamW with each arm's LR
# chosen on validation from x0.5, x1, x2 (lower variance may allow a larger step).
PROFILES["gap"] = Profile(
    headline_arms=("none", "nonzero", "p_star"),
    lr_sweep_arms=("nonzero", "p_star"),
    rollout_arms="off",
    logprob_rows="fed",
    mse_every=10,
    seeds=tuple(range(20)),
)
# gap-sgd: the theory's own setting, plain SGD, each arm's LR chosen on validation from 0.0025 to 0.02 (SGD's LR
# is on another scale: a GRPO step's gradient has norm about 1 at the SFT policy; GRPO at seed 0, 150k PO tokens:
# 0.005 rose from 0.70 to 0.82 held-out accuracy, 0.02 and 0.05 collapsed to near 0 within 8 rounds).
# gap-pool4x: a pool 4x larger per round at the default's 128 rows per step.
# gap-oracle: p* with every row's exact gradient norm in place of |A| (its GRPO and nonzero runs are gap's own:
# the same run keys, reused when both run into one --out).
PROFILES["gap-sgd"] = dataclasses.replace(
    PROFILES["gap"], optimizer="sgd", learning_rate=0.005, lr_sweep=(0.5, 2.0, 4.0)
)
PROFILES["gap-pool4x"] = dataclasses.replace(
    PROFILES["gap"], prompts_per_round=128, steps_per_generation=8, lr_sweep_arms=(), mse_every=3
)
PROFILES["gap-oracle"] = dataclasses.replace(PROFILES["gap"], headline_proxy="oracle", lr_sweep_arms=())
