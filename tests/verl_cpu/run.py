"""Launch ``python -m verl.trainer.main_ppo`` on the CPU with the tiny ``sort`` policy, and read its metrics.

``overrides`` is the whole CPU configuration: every line that is there only because of the CPU says so.
``launch`` runs verl's entry point in a subprocess of the verl environment (``.venv-verl``) and returns
the metrics verl's own ``file`` logger wrote, one dict per step.

    python -m verl_cpu.run OUT [key=value ...]      # one run; prints the per-step metrics as JSON lines
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


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
        "actor_rollout_ref.rollout.name=hf",  # CPU: verl_cpu.rollout (vLLM/SGLang need a GPU)
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
        "trainer.project_name=verl_cpu",
        f"trainer.experiment_name={name}",
        f"trainer.default_local_dir={root / 'ckpt' / name}",
    ]


def environment(*, gpu: bool = False) -> dict[str, str]:
    """The subprocess environment: this checkout's ``src`` and ``tests`` first; the CPU support unless ``gpu``."""
    env = dict(os.environ)
    paths = [str(REPO / "src"), str(REPO / "tests")]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if not gpu:
        env["VERL_USE_EXTERNAL_MODULES"] = "verl_cpu.patches"
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
    """Run verl's entry point; returns (per-step metrics from verl's file logger, the combined log)."""
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
        raise RuntimeError(
            f"{name}: main_ppo exited {proc.returncode}; last lines:\n" + "\n".join(out.splitlines()[-40:])
        )
    return read_metrics(log_path), out


if __name__ == "__main__":
    from verl_cpu.fixture import build_model, write_data

    root = Path(sys.argv[1]).resolve()
    root.mkdir(parents=True, exist_ok=True)
    build_model(root)
    write_data(root)
    metrics, _ = launch(root, overrides(root) + sys.argv[2:], name="cli")
    for m in metrics:
        print(json.dumps(m))
