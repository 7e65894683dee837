"""Launch ``python -m verl.trainer.main_ppo`` on the CPU with the tiny ``sort`` policy, and read its metrics.

``overrides`` is the whole CPU configuration: every line that is there only because of the CPU says so.
``launch`` runs verl's entry point in a subprocess of the verl environment (``.venv-verl``) and returns
the metrics verl's own ``file`` logger wrote, one dict per step.

    python -m verl_cpu.run OUT [key=value ...]      # one run; prints the per-step metrics as JSON lines
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def overrides(root: Path, *, workers: int = 1, steps: int = 3, batch: int = 4, n: int = 8, trainer_v1: bool = True,
              save_freq: int = -1, name: str = "run") -> list[str]:
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
        "actor_rollout_ref.model.use_remove_padding=false",  # CPU: no flash-attn varlen kernels
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",  # CPU: workers/config/model.py:185
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "actor_rollout_ref.actor.strategy=fsdp2",  # CPU: FSDP1's sync_module_states refuses CPU params (:437)
        "actor_rollout_ref.ref.strategy=fsdp2",
        "actor_rollout_ref.actor.optim.lr=1e-4",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={batch}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={batch * n // workers}",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.shuffle=false",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.entropy_coeff=0",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={batch * n // workers}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={batch * n // workers}",
        "actor_rollout_ref.rollout.name=hf",  # CPU: verl_cpu.rollout (vLLM/SGLang need a GPU)
        f"actor_rollout_ref.rollout.n={n}",
        "actor_rollout_ref.rollout.full_determinism=true",  # stable request ids: same seed, same rollouts
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "reward.num_workers=1",
        f"reward.custom_reward_function.path={HERE / 'fixture.py'}",
        "reward.custom_reward_function.name=compute_score",
        "trainer.device=cpu",
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
        "ray_kwargs.ray_init.num_cpus=16",  # CPU: logical CPUs, TransferQueue's actors each ask for one
        f"+ray_kwargs.ray_init.num_gpus={workers}",  # CPU: logical GPUs for single_controller/ray/base.py:210
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",  # 8 units x 1 CPU: hangs on 2 cores
    ]


def environment(extra_pythonpath: str = "") -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(REPO / "src"), str(REPO / "tests")] + ([extra_pythonpath] if extra_pythonpath else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["VERL_USE_EXTERNAL_MODULES"] = "verl_cpu"
    env["VERL_PLATFORM"] = "cpu"
    env.update(TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", RAY_DEDUP_LOGS="0",
               HYDRA_FULL_ERROR="1", WANDB_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    return env


def read_metrics(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line)["data"] | {"step": json.loads(line)["step"]}
            for line in path.read_text().splitlines() if line.strip()]


def launch(root: Path, args: list[str], *, name: str, python: str | None = None, timeout: float = 600,
           module: str = "verl.trainer.main_ppo") -> tuple[list[dict], str]:
    """Run verl's entry point; returns (per-step metrics from verl's file logger, the combined log)."""
    log_path = root / f"{name}.metrics.jsonl"
    env = environment()
    env["VERL_FILE_LOGGER_PATH"] = str(log_path)
    cmd = [python or sys.executable, "-m", module, *args]
    proc = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    (root / f"{name}.log").write_text(out)
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: main_ppo exited {proc.returncode}; last lines:\n" + "\n".join(out.splitlines()[-40:]))
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
