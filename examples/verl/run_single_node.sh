#!/usr/bin/env bash
# Cost-Aware GRPO, one node with 8 GPUs (not run by the costaware authors' CI: needs GPUs + vLLM).
#   METHOD=p_star|p_smooth|inv_sqrt_cost|none  LOSS=vanilla|cispo  ZVF=true|false  bash run_single_node.sh
# Install: pip install "costaware[verl]" "verl[vllm]>=0.9,<0.10"  (verl-core brings TransferQueue, vLLM).
# cost_aware_grpo.yaml sets every algorithm.cost_aware key and rollout.calculate_log_probs=false (what the
# log-prob saving needs); override any of them after the script's arguments, e.g. algorithm.cost_aware.alpha=0.05.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
METHOD=${METHOD:-p_star}
LOSS=${LOSS:-vanilla}
ZVF=${ZVF:-false}
NGPUS=${NGPUS:-8}
python -m verl.trainer.main_ppo \
  --config-path="$HERE" --config-name=cost_aware_grpo \
  algorithm.cost_aware.method="$METHOD" \
  algorithm.filter_groups.enable="$ZVF" \
  actor_rollout_ref.actor.policy_loss.loss_mode="$LOSS" \
  trainer.n_gpus_per_node="$NGPUS" trainer.nnodes=1 \
  trainer.experiment_name="qwen2.5-math-1.5b-${METHOD}-${LOSS}-zvf${ZVF}" \
  "$@"
