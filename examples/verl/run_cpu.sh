#!/usr/bin/env bash
# verl's own trainer on a CPU (2 cores are enough): main_ppo under its own local Ray, with the plugin.
# A tiny Qwen2 warmed up on `sort`, 16 prompts x 8 a step in two mini-batches, micro-batches of 8 rows,
# 3 GRPO steps, rollouts from an HF server (costaware.integrations.verl.cpu). A few minutes on 2 cores.
#   bash scripts/setup.sh --engine verl                    # .venv-verl: verl without TRL
#   METHOD=p_star bash examples/verl/run_cpu.sh [options] [main_ppo overrides]
# METHOD (default p_star; `stock`: verl alone) and ALPHA (default 0.01) set algorithm.cost_aware.method and
# .alpha; overrides given here come last and win, `+algorithm.cost_aware.*` ones included, e.g.
#   bash examples/verl/run_cpu.sh --steps 2 +algorithm.cost_aware.alpha=0.05 +algorithm.cost_aware.seed=3
# Options: --steps, --batch, -n, --mini, --micro, --workers, --trainer v1|v0 (python -m
# costaware.integrations.verl.cpu.run --help). PYTHON picks the interpreter (default .venv-verl's, else
# python3), OUT the working folder. The per-step metrics verl's file logger wrote are printed, one JSON line a
# step. The full main_ppo command line is costaware/integrations/verl/cpu/run.py:overrides (every CPU-only
# line is marked).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x "$REPO/.venv-verl/bin/python" ]; then PY="$REPO/.venv-verl/bin/python"; else PY=python3; fi
fi
OUT=${OUT:-"$REPO/outputs/verl_cpu"}
# calculate_log_probs=false: the old and reference log-prob passes then run on the fed rows only; verl's
# default (true) keeps stock's passes over every row
exec "$PY" -m costaware.integrations.verl.cpu.run "$OUT" --method "${METHOD:-p_star}" --alpha "${ALPHA:-0.01}" \
  actor_rollout_ref.rollout.calculate_log_probs=false "$@"
