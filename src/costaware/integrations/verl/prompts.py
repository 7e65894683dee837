"""The prompt stage in verl: a curriculum sampler that lets a :class:`costaware.rollouts.stage.PromptStage`
choose which prompts each training step generates.

verl 0.9 (trainer v0; needs the costaware verl plugin, loaded by ``import verl`` through the ``verl.plugins``
entry point or ``VERL_USE_EXTERNAL_MODULES=costaware.integrations.verl``). verl 0.9 dropped ``data.sampler``
and the ``sampler.update`` call; the plugin puts both back (``curriculum``: its ``create_rl_sampler``
builds the class, its ``RayPPOTrainer._update_actor`` wrapper calls ``update``)::

    python -m verl.trainer.main_ppo ... trainer.use_v1=false data.dataloader_num_workers=0 \\
        +data.sampler.class_path=pkg://costaware.integrations.verl.prompts \\
        +data.sampler.class_name=CostAwarePromptSampler \\
        +data.sampler.costaware.method=greso

Trainer v1 (``trainer.use_v1=true``, verl 0.9's default) refuses ``data.sampler.class_path``: it draws
prompts ahead of their rewards. Without the plugin (``COSTAWARE_VERL_PLUGIN=0``) verl 0.9 ignores the key.

verl ≤ 0.8 has the hook itself (``verl/trainer/main_ppo.py:create_rl_sampler``,
``RayPPOTrainer.fit``), and ``data.sampler`` in its config (no ``+`` before ``class_path``/``class_name``)::

    python -m verl.trainer.main_ppo ... data.dataloader_num_workers=0 \\
        data.sampler.class_path=pkg://costaware.integrations.verl.prompts \\
        data.sampler.class_name=CostAwarePromptSampler \\
        +data.sampler.costaware.method=greso

(``pkg://``: verl reads a bare path as a file path.)

How verl drives it: the ``StatefulDataLoader`` asks for ``data.gen_batch_size or data.train_batch_size``
= B indices per step, one round; verl repeats each prompt ``rollout.n`` = G times itself
(``batch.repeat(interleave=True)``), scores the rows, and :meth:`CostAwarePromptSampler.update` gets the
scored batch (verl 0.9: as the actor update starts; ≤ 0.8: at the end of the step). The round's B prompts
are drawn when its first index is asked for, after the previous round was folded in: nothing may be
fetched ahead (``data.dataloader_num_workers=0``), and a round asked for before the previous one was
folded in is an error, not a repeat. The batch reaches ``update`` reordered by ``trainer.balance_batch``, so rows
are mapped back to draw slots by their group (``uid``) and their dataset key (``index``, which
``RLHFDataset`` copies from ``extra_info.index``, read from ``extra_info`` where verl 0.9 popped ``index``
off the batch; it must be unique per row).

Methods: the registered prompt rules (:data:`costaware.rollouts.prompt_rule.REGISTRY`) without weights, other
than the plain one: today the biased skip rules ``greso`` and ``cost_aware_skip``. A weighted rule
(``cost_aware``) is refused: its prompt factor 1/(N q_j) must scale every row's loss, but nothing carries a
per-prompt factor from the sampler to verl's loss.

Checkpoints: ``StatefulDataLoader.state_dict`` stores the sampler's :meth:`state_dict` (the sampler has
``state_dict``/``load_state_dict``, so torchdata treats it as ``Stateful``). verl 0.9 with the plugin saves
it after ``update``: a resumed run repeats nothing and draws what the uninterrupted run draws given the
same rewards. verl ≤ 0.8 saves it before ``update``: a round drawn but not folded in is saved as not drawn,
so the resumed run generates that round's prompts once more, and from there draws the same.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import numpy as np
from torch.utils.data import Sampler

from costaware._checks import integer
from costaware.rollouts.prompts import REGISTRY, PromptMethod, prompt_method_names, prompt_method_options
from costaware.rollouts.stage import PromptStage
from costaware.rollouts.state import StateConfig

try:  # verl <= 0.8: verl.trainer checks isinstance(sampler, AbstractCurriculumSampler) before update()
    from verl.experimental.dataset.sampler import AbstractCurriculumSampler as _Base
except ImportError:  # no verl, or verl 0.9 (the plugin's hook, curriculum.py, needs no base): a torch sampler
    _Base = Sampler

__all__ = [
    "OPTIONS_KEY",
    "CostAwarePromptSampler",
    "check_options",
    "dataset_keys",
    "fold_batch",
    "is_prompt_sampler",
]

OPTIONS_KEY = "data.sampler.costaware"
_REFUSED = {"two_stage": "it needs a second generation call inside the step, which verl's trainer does not make"}


def _verl_rule(m: PromptMethod) -> bool:
    return not m.weighted and not m.plain


def _offered() -> tuple[str, ...]:
    """The registered rules verl runs, read when the options are: no weights, not plain."""
    return prompt_method_names(_verl_rule)


def _refused(name: str) -> str | None:
    """Why verl does not run the registered or known rule ``name`` (None: it does, or no such rule)."""
    if name in _REFUSED:
        return _REFUSED[name]
    if name not in REGISTRY or name in _offered():
        return None
    if REGISTRY[name]().plain:
        return f"use verl's own sampler (data.shuffle=true) for {name} prompts"
    return (
        f"its prompt factor 1/(N q_j) must multiply every row's loss, but verl gives the sampler no way into "
        f"the loss; use one of {_offered()} (no weights), or the TRL integration for {name}"
    )


_COMMON = ("method", "seed", "group_size", "index_key", "max_candidate_batches")
_STATE = tuple(p for p in inspect.signature(StateConfig).parameters if p not in ("group_size", "std", "eps"))


def _get(node: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if node is None:
            return None
        getter = getattr(node, "get", None)
        node = getter(part, None) if getter is not None else getattr(node, part, None)
    return node


def _group_size(data_config: Any, options: Mapping[str, Any]) -> int:
    """G: ``costaware.group_size``, else ``actor_rollout_ref.rollout.n`` read through the data node's root."""
    if options.get("group_size") is not None:
        return integer(options["group_size"], f"{OPTIONS_KEY}.group_size", minimum=1)
    n = None
    try:
        from omegaconf import OmegaConf

        n = OmegaConf.select(data_config, "..actor_rollout_ref.rollout.n", default=None)
    except Exception:  # not an OmegaConf node, or one without a parent: fall through to the error
        n = None
    if n is None:
        raise ValueError(
            f"{OPTIONS_KEY}.group_size must be set to actor_rollout_ref.rollout.n (the data config "
            "does not reach the rollout config), got None"
        )
    return integer(n, "actor_rollout_ref.rollout.n", minimum=1)


def _read_options(data_config: Any, num_prompts: int | None) -> tuple[Any, dict[str, Any]]:
    """(the prompt method, the PromptStage arguments) from ``data.sampler.costaware``, each checked once.

    ``num_prompts``: the dataset's size; None (on the driver, before the dataset is loaded) checks
    everything but the round's size against it."""
    node = _get(data_config, "sampler.costaware")
    if node is None:
        raise ValueError(f"{OPTIONS_KEY} must be set (at least +{OPTIONS_KEY}.method={'|'.join(_offered())}), got None")
    try:
        options = dict(node.items())
    except AttributeError:
        raise ValueError(f"{OPTIONS_KEY} must be a mapping, got {node!r}") from None
    method = options.get("method")
    why = _refused(method) if isinstance(method, str) else None
    if why is not None:
        raise ValueError(f"{OPTIONS_KEY}.method={method!r} is not offered in verl: {why}")
    offered = _offered()
    if method not in offered:
        raise ValueError(f"{OPTIONS_KEY}.method must be one of {offered}, got {method!r}")
    rule = REGISTRY[method]
    own = prompt_method_options(method)
    unknown = sorted(set(options) - set(_COMMON) - set(_STATE) - set(own))
    if unknown:
        raise ValueError(
            f"{OPTIONS_KEY} has unknown key(s) {unknown} for method={method!r}; known keys are "
            f"{sorted(_COMMON + _STATE + own)}"
        )
    workers = _get(data_config, "dataloader_num_workers")
    if workers not in (0, None):
        raise ValueError(
            f"data.dataloader_num_workers must be 0 with {OPTIONS_KEY} (a worker would fetch the next "
            f"round before this one's rewards are folded in), got {workers!r}"
        )
    batch = _get(data_config, "gen_batch_size") or _get(data_config, "train_batch_size")
    g = _group_size(data_config, options)
    seed = options.get("seed")
    seed = _get(data_config, "seed") if seed is None else seed
    try:  # the core checks every value; its message starts with the argument's name
        built = rule(**{k: options[k] for k in own if options.get(k) is not None})
        state = StateConfig(group_size=g, **{k: options[k] for k in _STATE if options.get(k) is not None})
        per_round = integer(batch, "data.train_batch_size", minimum=1, maximum=num_prompts)
        args: dict[str, Any] = {
            "num_prompts": per_round if num_prompts is None else num_prompts,
            "group_size": g,
            "state_config": state,
            "prompts_per_round": per_round,
            "seed": integer(0 if seed is None else seed, "seed", minimum=0),
            "max_candidate_batches": 64
            if options.get("max_candidate_batches") is None
            else options["max_candidate_batches"],
        }
        PromptStage(built, **args)
    except (TypeError, ValueError) as e:
        text = str(e)
        raise type(e)(text if text.startswith("data.") else f"{OPTIONS_KEY}.{text}") from None
    return built, args


def is_prompt_sampler(data_config: Any) -> bool:
    """True when ``data.sampler`` names this module's :class:`CostAwarePromptSampler`."""
    path, name = _get(data_config, "sampler.class_path"), _get(data_config, "sampler.class_name")
    module = str(path or "").removeprefix("pkg://").replace("/", ".")
    return module == __name__ and name == "CostAwarePromptSampler"


def check_options(data_config: Any) -> None:
    """Check ``data.sampler.costaware`` before the dataset is loaded (the driver's check); the size of a
    round against the dataset's is checked when the sampler is built."""
    _read_options(data_config, None)


class _Rows(Protocol):
    """What the sampler reads of verl's dataset: its length and its rows by position."""

    def __len__(self) -> int: ...
    def __getitem__(self, i: int, /) -> Any: ...


def dataset_keys(data_source: _Rows, index_key: str = "index") -> np.ndarray:
    """Each dataset row's key, the value verl puts in ``non_tensor_batch[index_key]`` for it.

    ``RLHFDataset`` (a ``dataframe``) sets ``index`` from ``extra_info.index``, read here as one column, not
    row by row; any other dataset is read row by row (``data_source[i][index_key]``), once. The keys must be
    unique, all integers or all strings: they are how a scored row finds its prompt.
    """
    frame = getattr(data_source, "dataframe", None)
    if index_key == "index" and frame is not None and "extra_info" in getattr(frame, "column_names", ()):
        raw = [(e or {}).get("index", 0) for e in frame["extra_info"]]
        where = "extra_info.index"
    else:
        raw = [data_source[i][index_key] for i in range(len(data_source))]
        where = f"the dataset's {index_key!r}"
    keys = np.asarray(raw)
    if keys.dtype.kind not in "iuU" or keys.ndim != 1:
        raise ValueError(f"{where} must be all integers or all strings, one per row, got dtype {keys.dtype}")
    uniq, counts = np.unique(keys, return_counts=True)
    if uniq.size != keys.size:
        raise ValueError(
            f"{where} must be unique per row (a scored row finds its prompt by it), got "
            f"{uniq[counts > 1][:5].tolist()} on several rows"
        )
    return keys


def _rows(batch: Any, key: str, where: str) -> Any:
    store = batch.non_tensor_batch if where == "non_tensor_batch" else batch.batch
    if key not in store.keys():
        raise ValueError(f"batch.{where} has no {key!r}; the prompt sampler needs it to fold the round in")
    return store[key]


def _batch_keys(batch: Any, index_key: str) -> np.ndarray:
    """Each row's dataset key: ``non_tensor_batch[index_key]``, else (verl 0.9's ``_get_gen_batch`` pops
    ``index`` into the generation batch, and only a colocated reward brings it back) ``extra_info.index``,
    where ``RLHFDataset`` read it."""
    store = batch.non_tensor_batch
    if index_key == "index" and index_key not in store.keys() and "extra_info" in store.keys():
        return np.asarray([(e or {}).get("index", 0) for e in store["extra_info"]])
    return np.asarray(_rows(batch, index_key, "non_tensor_batch"))


def fold_batch(
    batch: Any,
    drawn_keys: np.ndarray,
    group_size: int,
    index_key: str = "index",
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(rewards, completion lengths, prompt tokens) of a verl batch as (B, G), (B, G), (B,) in draw order.

    ``drawn_keys`` (B,) are the drawn prompts' dataset keys in draw order. Rows are grouped by ``uid``;
    a group finds its slot by its key, and groups of one prompt drawn twice take its slots in batch order.
    A row's reward is its ``token_level_scores`` summed over ``response_mask``, clamped to [0, 1] (the
    state's model is 0/1 correctness), its length the mask's sum.
    """
    b, g = drawn_keys.size, group_size
    uid = np.asarray(_rows(batch, "uid", "non_tensor_batch"))
    keys = _batch_keys(batch, index_key).astype(drawn_keys.dtype)
    mask = _rows(batch, "response_mask", "batch").double()
    reward = (_rows(batch, "token_level_scores", "batch").double() * mask).sum(-1).clamp(0, 1).numpy()
    length = mask.sum(-1).numpy()
    if uid.size != b * g:
        raise ValueError(f"the batch has {uid.size} rows, but the round's {b} prompts x rollout.n={g} need {b * g}")
    groups, first, group_of = np.unique(uid, return_index=True, return_inverse=True)
    sizes = np.bincount(group_of, minlength=groups.size)
    if groups.size != b or (sizes != g).any():
        raise ValueError(
            f"the batch must hold {b} groups (uids) of rollout.n={g} rows each, got group sizes "
            f"{np.unique(sizes).tolist()} over {groups.size} groups"
        )
    group_key = keys[first]
    if (keys != group_key[group_of]).any():
        raise ValueError(f"rows of one uid carry different {index_key!r} values")
    # match groups to slots by key; ties (a prompt drawn twice) in batch order / draw order
    by_group = np.lexsort((first, group_key))
    by_slot = np.lexsort((np.arange(b), drawn_keys))
    if (group_key[by_group] != drawn_keys[by_slot]).any():
        raise ValueError(
            f"the batch's prompts ({index_key!r} {np.sort(group_key)[:8].tolist()}...) are not the drawn "
            f"round's ({np.sort(drawn_keys)[:8].tolist()}...)"
        )
    slot_of_group = np.empty(b, dtype=np.int64)
    slot_of_group[by_group] = by_slot
    order = np.lexsort((np.arange(uid.size), slot_of_group[group_of])).reshape(b, g)
    tokens = None
    store = batch.batch
    if "prompts" in store.keys() and "attention_mask" in store.keys():
        width = store["prompts"].shape[-1]
        tokens = store["attention_mask"][:, :width].sum(-1).double().numpy()[order[:, 0]]
    return reward[order], length[order], tokens


class CostAwarePromptSampler(_Base):
    """A verl train sampler whose rounds a :class:`PromptStage` draws; see the module docstring.

    Args (verl passes both by name):
        data_source: the train dataset (its length is N; its rows' keys map scored rows back).
        data_config: verl's ``data`` config; options under ``data.sampler.costaware``: ``method``
            (a registered rule without weights: ``greso`` | ``cost_aware_skip``), that rule's options
            (:data:`costaware.sampling_options.PROMPT_OPTIONS`), ``seed`` (default ``data.seed``, else 0),
            ``group_size`` (default ``actor_rollout_ref.rollout.n``), ``index_key`` (default ``index``),
            ``max_candidate_batches`` and the :class:`StateConfig` fields.
    """

    def __init__(self, data_source: _Rows, data_config: Any) -> None:
        n = len(data_source)
        method, args = _read_options(data_config, n)
        options = _get(data_config, "sampler.costaware")
        self.index_key = str(options.get("index_key") or "index")
        self.keys = dataset_keys(data_source, self.index_key)
        self.stage = PromptStage(method, **args)
        self.rounds_per_pass = n // self.stage.batch  # verl's dataloader drops the last partial batch
        self._pass_round = 0  # rounds of the current pass handed out (the pending one included)
        self._resume_round: int | None = None

    def __iter__(self) -> Iterator[int]:
        start, self._resume_round = (self._resume_round or 0), None
        for k in range(start, self.rounds_per_pass):
            if self.stage.pending is not None:  # draw() would hand out the unfolded round again
                raise RuntimeError(
                    f"CostAwarePromptSampler: round {self.stage.round + 1} was asked for before round "
                    f"{self.stage.round}'s scored batch reached update(); on verl 0.9 the costaware plugin calls "
                    "update() from RayPPOTrainer._update_actor (trainer v0, trainer.critic_warmup=0)"
                )
            ids = self.stage.draw().prompt_ids  # drawn when the round's first index is asked for
            self._pass_round = k + 1
            yield from ids.tolist()
        self._pass_round = 0

    def __len__(self) -> int:
        return self.rounds_per_pass * self.stage.batch

    def update(self, batch: Any) -> None:
        """Fold a scored verl batch (``DataProto``) into the stage: the round drawn last."""
        d = self.stage.draw()  # the round in progress
        rewards, lengths, tokens = fold_batch(
            batch, self.keys[d.prompt_ids], self.stage.state.config.group_size, self.index_key
        )
        self.stage.update(d.prompt_ids, rewards, lengths, prompt_tokens=tokens)

    def state_dict(self) -> dict[str, Any]:
        """The stage (which saves a round drawn but not folded in as not drawn) and the position in the pass."""
        return {
            "stage": self.stage.state_dict(),
            "pass_round": self._pass_round,
            "pending": self.stage.pending is not None,
        }

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        if not isinstance(saved, dict) or not {"stage", "pass_round", "pending"} <= set(saved):
            raise ValueError(f"saved must be a CostAwarePromptSampler.state_dict(), got {saved!r:.200}")
        self.stage.load_state_dict(saved["stage"])
        pos = integer(saved["pass_round"], "saved['pass_round']", minimum=0, maximum=self.rounds_per_pass)
        # a pending round was handed out but never folded in: the dataloader counts it, and the next
        # round asked for draws it again from the restored stage
        self._pass_round = self._resume_round = pos
