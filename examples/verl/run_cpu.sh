#!/usr/bin/env bash
# verl's own trainer on a CPU (2 cores are enough): the loop tests/test_verl_e2e.py runs.
# A tiny Qwen2 warmed up on `sort`, 4 prompts x 8 a step, 3 GRPO steps, rollouts from an HF server
# (tests/verl_cpu), Ray on this machine. About 1 min, most of it Ray start-up.
#   bash scripts/setup.sh --engine verl                  # .venv-verl: verl without TRL
#   METHOD=p_star bash examples/verl/run_cpu.sh [extra main_ppo overrides]
# The full main_ppo command line is in tests/verl_cpu/run.py:overrides (every CPU-only line is marked);
# the metrics verl's file logger wrote are printed, one JSON line per step.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
METHOD=${METHOD:-p_star}
OUT=${OUT:-"$REPO/outputs/verl_cpu"}
extra=()
[ "$METHOD" = stock ] || extra=(+algorithm.cost_aware.method="$METHOD" +algorithm.cost_aware.alpha=0.01)
cd "$REPO"
PYTHONPATH="$REPO/src:$REPO/tests" .venv-verl/bin/python -m verl_cpu.run "$OUT" "${extra[@]}" "$@"
