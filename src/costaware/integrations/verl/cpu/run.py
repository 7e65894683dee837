"""Launch ``python -m verl.trainer.main_ppo`` on the CPU with the tiny ``sort`` policy, and read its metrics.

``overrides`` is the whole CPU configuration: every line that is there only because of the CPU says so.
``launch`` runs verl's entry point in a subprocess (by default this interpreter: an environment with the
``verl`` extra and without TRL) and returns the metrics verl's own ``file`` logger wrote, one dict per step.
Every run starts its own local Ray (``ray_init.address=local``, ``RAY_ADDRESS`` dropped): it never joins a
cluster already running on the machine.

    python -m costaware.integrations.verl.cpu.run OUT [--method M] [--steps 3] [key=value ...]

builds the model and data under OUT, runs once and prints the per-step metrics as JSON lines. The defaults
(16 prompts x 8 a step, two mini-batches, micro-batches of 8 rows) are a shape where the plugin's saving
shows; main_ppo overrides come last and win, ``+algorithm.cost_aware.*`` ones included (:func:`combine`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLUGIN_KEY = "algorithm.cost_aware"


def overrides(
    root: Path,
    *,
    workers: int = 1,
    steps: int = 3,
    batch: int = 4,
    n: int = 8,
    trainer_v1: bool = True,
    save_freq: int = -1,
    name: str = "run",
    gpu: bool = False,
    mini: int | None = None,
    micro: int | None = None,
) -> list[str]:
    """main_ppo's overrides; ``gpu=True``: the same run on CUDA GPUs with vLLM rollouts (no CPU lines).

    ``mini``: prompts per PPO mini-batch (default ``batch``: one optimiser step a batch); ``micro``: rows per
    micro-batch and GPU of the actor and the log-prob passes (default: a worker's whole share, one micro-batch).
    """
    args = _common(
        root,
        workers=workers,
        steps=steps,
        batch=batch,
        n=n,
        trainer_v1=trainer_v1,
        save_freq=save_freq,
        name=name,
        mini=mini or batch,
        micro=micro,
    )
    if gpu:
        return args + [
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
            "actor_rollout_ref.rollout.enforce_eager=true",
            "trainer.device=cuda",
        ]
    return args + [
        "actor_rollout_ref.model.use_remove_padding=false",  # CPU: no flash-attn varlen kernels
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",  # CPU: workers/config/model.py:185
        "actor_rollout_ref.actor.strategy=fsdp2",  # CPU: FSDP1's sync_module_states refuses CPU params (:437)
        "actor_rollout_ref.ref.strategy=fsdp2",
        # CPU: fp32 compute (FSDP's default bf16 params are slow on a CPU, and 1e-3-precise)
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        "+actor_rollout_ref.ref.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        "actor_rollout_ref.rollout.name=hf",  # CPU: cpu/rollout.py (vLLM/SGLang need a GPU)
        "trainer.device=cpu",
        "ray_kwargs.ray_init.num_cpus=16",  # CPU: logical CPUs, TransferQueue's actors each ask for one
        f"+ray_kwargs.ray_init.num_gpus={workers}",  # CPU: logical GPUs for single_controller/ray/base.py:210
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",  # 8 units x 1 CPU: hangs on 2 cores
    ]


def _common(
    root: Path,
    *,
    workers: int,
    steps: int,
    batch: int,
    n: int,
    trainer_v1: bool,
    save_freq: int,
    name: str,
    mini: int,
    micro: int | None,
) -> list[str]:
    model = root / "model"
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={root / 'train.parquet'}",
        f"data.val_files={root / 'val.parquet'}",
        f"data.train_batch_size={batch}",
        "data.max_prompt_length=8",
        "data.max_response_length=16",
        "data.shuffle=false",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "actor_rollout_ref.actor.optim.lr=1e-4",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro or mini * n // workers}",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.shuffle=false",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.entropy_coeff=0",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro or batch * n // workers}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro or batch * n // workers}",
        f"actor_rollout_ref.rollout.n={n}",
        "actor_rollout_ref.rollout.full_determinism=true",  # stable request ids: same seed, same rollouts
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "reward.num_workers=1",
        f"reward.custom_reward_function.path={HERE / 'fixture.py'}",
        "reward.custom_reward_function.name=compute_score",
        f"trainer.use_v1={str(trainer_v1).lower()}",
        f"trainer.n_gpus_per_node={workers}",
        "trainer.nnodes=1",
        f"trainer.total_training_steps={steps}",
        "trainer.total_epochs=100",
        "trainer.logger=[console,file]",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        f"trainer.save_freq={save_freq}",
        "trainer.project_name=costaware_verl_cpu",
        f"trainer.experiment_name={name}",
        f"trainer.default_local_dir={root / 'ckpt' / name}",
        "+ray_kwargs.ray_init.address=local",  # its own Ray: never a cluster already running here
    ]


def _source_root() -> str | None:
    """The folder this costaware was imported from when it is a source tree (``src/``), not an installed one."""
    root = Path(__file__).resolve().parents[4]
    return None if root.name in ("site-packages", "dist-packages") else str(root)


def environment(*, gpu: bool = False) -> dict[str, str]:
    """The subprocess environment: the CPU support unless ``gpu``; no ``RAY_ADDRESS`` (each run starts its own
    Ray); ``PYTHONPATH`` made absolute (the run starts in its own folder), led by this costaware's source tree
    when it was not imported from an installed copy."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    paths = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    source = _source_root()
    paths = list(dict.fromkeys(([source] if source else []) + paths))
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    if not gpu:
        env["VERL_USE_EXTERNAL_MODULES"] = f"{__package__}.patches"
        env["VERL_PLATFORM"] = "cpu"
    env.update(
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        RAY_DEDUP_LOGS="0",
        HYDRA_FULL_ERROR="1",
        WANDB_MODE="disabled",
        RAY_USAGE_STATS_ENABLED="0",
    )
    return env


def read_metrics(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [
        json.loads(line)["data"] | {"step": json.loads(line)["step"]}
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def launch(
    root: Path,
    args: list[str],
    *,
    name: str,
    python: str | None = None,
    timeout: float = 600,
    module: str = "verl.trainer.main_ppo",
    gpu: bool = False,
) -> tuple[list[dict], str]:
    """Run verl's entry point; returns (per-step metrics from verl's file logger, the combined log).

    Ray gives its node a fixed 30 s to register; on a loaded machine it can miss that before any step ran, so
    that one failure is retried once, said on stderr."""
    for attempt in range(2):
        try:
            return _launch_once(root, args, name=name, python=python, timeout=timeout, module=module, gpu=gpu)
        except RayNodeStartTimeout as exc:
            if attempt:
                raise RuntimeError(str(exc)) from None
            print(f"{name}: Ray's node did not start within its 30 s (a loaded machine?); starting once more",
                  file=sys.stderr)  # fmt: skip
    raise AssertionError("unreachable")


RAY_NODE_START_TIMEOUT = "The current node timed out during startup"


class RayNodeStartTimeout(RuntimeError):
    """main_ppo failed before any step because Ray's node did not register in time."""


def _launch_once(
    root: Path, args: list[str], *, name: str, python: str | None, timeout: float, module: str, gpu: bool
) -> tuple[list[dict], str]:
    log_path = root / f"{name}.metrics.jsonl"
    env = environment(gpu=gpu)
    env["VERL_FILE_LOGGER_PATH"] = str(log_path)
    cmd = [python or sys.executable, "-m", module, *args]
    # its own session: on a timeout the whole group (the driver and the Ray processes it started) goes
    proc = subprocess.Popen(
        cmd, env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        (root / f"{name}.log").write_text(out)
        raise RuntimeError(f"{name}: main_ppo ran past {timeout} s; log: {root / f'{name}.log'}") from None
    (root / f"{name}.log").write_text(out)
    if proc.returncode != 0:
        error = RayNodeStartTimeout if RAY_NODE_START_TIMEOUT in out else RuntimeError
        raise error(f"{name}: main_ppo exited {proc.returncode}; last lines:\n" + "\n".join(out.splitlines()[-40:]))
    return read_metrics(log_path), out


def override_key(arg: str) -> str:
    """The config key a Hydra override names: ``a.b`` for ``a.b=1``, ``+a.b=1``, ``++a.b=1`` and ``~a.b``."""
    return arg.split("=", 1)[0].lstrip("+~")


def combine(defaults: list[str], user: list[str]) -> list[str]:
    """``defaults`` less those whose key a ``user`` override names, then ``user``: the user's value wins.

    Hydra refuses ``+key=`` for a key already added, so a default is dropped rather than overridden. A user
    override without ``+`` of a key Hydra's config lacks (one a dropped default added, or any
    ``algorithm.cost_aware.*``) gets the ``+``; a ``~key`` of a key only a default added removes that default.

    >>> combine(["+algorithm.cost_aware.method=p_star", "+algorithm.cost_aware.alpha=0.01", "a.b=1"],
    ...         ["+algorithm.cost_aware.alpha=0.1", "algorithm.cost_aware.seed=3", "a.b=2"])
    ['+algorithm.cost_aware.method=p_star', '+algorithm.cost_aware.alpha=0.1', '+algorithm.cost_aware.seed=3', 'a.b=2']
    """
    added = {override_key(d) for d in defaults if d.startswith("+") and not d.startswith("++")}
    named = {override_key(a) for a in user}
    out = [d for d in defaults if override_key(d) not in named]
    for arg in user:
        key = override_key(arg)
        if arg.startswith("~") and key in added:
            continue  # the default that would have added it is gone already
        if not arg.startswith(("+", "~")) and (key in added or key.startswith(f"{PLUGIN_KEY}.")):
            arg = f"+{arg}"
        out.append(arg)
    return out


def plugin_overrides(method: str, alpha: float) -> list[str]:
    """The plugin's keys for ``method`` (``stock``: none, verl as shipped)."""
    if method == "stock":
        return []
    return [f"+{PLUGIN_KEY}.method={method}", f"+{PLUGIN_KEY}.alpha={alpha}"]


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m costaware.integrations.verl.cpu.run",
        description="verl's main_ppo on the CPU with the tiny sort policy; prints verl's per-step metrics as JSON.",
    )
    parser.add_argument("out", type=Path, help="working folder: the model, the data, the logs")
    parser.add_argument("overrides", nargs="*", help="main_ppo overrides (key=value, +key=value), applied last")
    parser.add_argument("--method", default="p_star", help="algorithm.cost_aware.method; 'stock': no plugin")
    parser.add_argument("--alpha", type=float, default=0.01, help="algorithm.cost_aware.alpha")
    parser.add_argument("--steps", type=_positive, default=3, help="GRPO steps (trainer.total_training_steps)")
    parser.add_argument("--batch", type=_positive, default=16, help="prompts a step (data.train_batch_size)")
    parser.add_argument("-n", type=_positive, default=8, help="responses a prompt (rollout.n)")
    parser.add_argument("--mini", type=_positive, default=8, help="prompts a mini-batch (ppo_mini_batch_size)")
    parser.add_argument("--micro", type=_positive, default=8, help="rows a micro-batch and worker")
    parser.add_argument("--workers", type=_positive, default=1, help="actor workers (logical GPUs)")
    parser.add_argument("--trainer", choices=["v1", "v0"], default="v1", help="verl's trainer (v1: its default)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds before the run is stopped")
    parser.add_argument("--sft-steps", type=_positive, default=300, help="SFT warm-up steps of a new model")
    args = parser.parse_intermixed_args(argv)
    from costaware.integrations.verl.cpu.fixture import build_model, write_data

    root = args.out.resolve()
    root.mkdir(parents=True, exist_ok=True)
    build_model(root, sft_steps=args.sft_steps)
    write_data(root)
    shape = {"workers": args.workers, "steps": args.steps, "batch": args.batch, "n": args.n, "mini": args.mini}
    defaults = overrides(root, **shape, micro=args.micro, trainer_v1=args.trainer == "v1", name="run")
    defaults += plugin_overrides(args.method, args.alpha)
    metrics, _ = launch(root, combine(defaults, args.overrides), name="run", timeout=args.timeout)
    for m in metrics:
        print(json.dumps(m))


if __name__ == "__main__":
    main()
