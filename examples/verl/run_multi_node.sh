#!/usr/bin/env bash
# Cost-Aware GRPO on a Ray cluster of NNODES nodes x 8 GPUs (not run here: needs GPUs, vLLM, Ray cluster).
# 1. On the head node:     ray start --head --port=6379
# 2. On every other node:  ray start --address=<head-ip>:6379
#    Every node needs the same Python env with costaware installed: the verl.plugins entry point then
#    loads the plugin in every Ray worker (or export VERL_USE_EXTERNAL_MODULES=costaware.integrations.verl).
# 3. On the head node:     NNODES=4 bash run_multi_node.sh
# cost_aware_grpo.yaml sets every algorithm.cost_aware key and rollout.calculate_log_probs=false (what the
# log-prob saving needs); override any of them after the script's arguments.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
METHOD=${METHOD:-p_star}
LOSS=${LOSS:-vanilla}
NNODES=${NNODES:-2}
export RAY_ADDRESS=${RAY_ADDRESS:-auto}
python -m verl.trainer.main_ppo \
  --config-path="$HERE" --config-name=cost_aware_grpo \
  algorithm.cost_aware.method="$METHOD" \
  actor_rollout_ref.actor.policy_loss.loss_mode="$LOSS" \
  trainer.nnodes="$NNODES" trainer.n_gpus_per_node=8 \
  data.train_batch_size=$((128 * NNODES / 2 > 128 ? 128 * NNODES / 2 : 128)) \
  trainer.experiment_name="qwen2.5-math-1.5b-${METHOD}-${LOSS}-${NNODES}nodes" \
  "$@"
