#!/usr/bin/env bash
# Creates .venv and installs costaware with every extra, torch first.
#
#   bash scripts/setup.sh            # picks the route: GPU if `nvidia-smi` runs, else CPU
#   bash scripts/setup.sh --cpu      # force the CPU-only route   (or COSTAWARE_TORCH=cpu)
#   bash scripts/setup.sh --gpu      # force the CUDA route        (or COSTAWARE_TORCH=cuda)
#   bash scripts/setup.sh --engine verl   # .venv-verl: costaware[verl,dev] without TRL, for verl's trainer
#
# Why verl gets its own environment: verl 0.9.x builds every FSDP model through
# verl/models/transformers/monkey_patch.py, which imports `AutoModelForCausalLMWithValueHead` from trl
# whenever trl is importable; TRL 1.16 (the `trl` extra) no longer has it, so with both installed verl
# cannot build a model. `.venv` (all extras) still imports verl's modules for the unit tests; verl's
# trainer runs from `.venv-verl` (verl 0.9.x, transformers 5.5.3-5.10, ray >= 2.41, no trl).
#
# Why torch goes in first, on its own: pyproject.toml asks for `torch>=2.3`, and with no torch
# present pip would resolve that from PyPI, whose Linux wheel is the multi-GB CUDA build. Installing
# torch beforehand leaves the requirement satisfied, so the `pip install -e .[all,dev]` below keeps it.
#
# CPU route, in order:
#   1. `pip install --no-index --no-deps torch==V`: only pip's configured find-links (pip.conf or
#      PIP_FIND_LINKS) are searched, never a network index. Machines that ship a local CPU wheel (like
#      the one this project is developed on) install it this way; its dependencies then come from the
#      configured indexes (`pip install torch==V`, torch itself already satisfied).
#   2. otherwise `pip install torch==V --index-url https://download.pytorch.org/whl/cpu`: PyTorch's
#      CPU-only wheel index (about 200 MB instead of several GB). --index-url applies to this one
#      command, so every other package still comes from PyPI.
# GPU route: `pip install torch==V` from the default index (PyPI's Linux wheel is the CUDA build).
# Either way the script ends by printing the torch it installed and whether it sees a GPU.
#
# PYTHON picks the interpreter (default python3); COSTAWARE_TORCH_VERSION the torch version.
set -euo pipefail
cd "$(dirname "$0")/.."

route=${COSTAWARE_TORCH:-auto}
engine=all
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) route=cpu ;;
    --gpu | --cuda) route=cuda ;;
    --engine) shift; engine=${1:-} ;;
    --engine=*) engine=${1#--engine=} ;;
    -h | --help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$1' (use --cpu, --gpu or --engine verl)" >&2; exit 2 ;;
  esac
  shift
done
case "$engine" in
  all) VENV=.venv; EXTRAS="all,dev" ;;
  verl) VENV=.venv-verl; EXTRAS="verl,dev" ;;
  *) echo "setup.sh: --engine must be verl (or omitted for every extra in .venv), got '$engine'" >&2; exit 2 ;;
esac
if [ "$route" = auto ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then route=cuda; else route=cpu; fi
fi
case "$route" in
  cpu | cuda) ;;
  gpu) route=cuda ;;
  *) echo "setup.sh: COSTAWARE_TORCH must be cpu or cuda, got '$route'" >&2; exit 2 ;;
esac

TORCH_VERSION=${COSTAWARE_TORCH_VERSION:-2.13.0}
CPU_INDEX=https://download.pytorch.org/whl/cpu
PY=${PYTHON:-python3}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install -q --upgrade pip

echo "setup.sh: torch $TORCH_VERSION, $route route"
if [ "$route" = cpu ]; then
  # --no-deps: a local wheel directory usually holds torch but not its dependencies (--no-index
  # also hides file:// indexes); they come from the configured indexes in the next command.
  if "${PIP[@]}" install -q --no-index --no-deps "torch==$TORCH_VERSION" 2>/dev/null; then
    echo "setup.sh: installed a local torch wheel"
    "${PIP[@]}" install -q "torch==$TORCH_VERSION"
  else
    echo "setup.sh: no local torch wheel; using PyTorch's CPU index $CPU_INDEX"
    "${PIP[@]}" install -q "torch==$TORCH_VERSION" --index-url "$CPU_INDEX"
  fi
else
  "${PIP[@]}" install -q "torch==$TORCH_VERSION"
fi
"${PIP[@]}" install -q -e ".[$EXTRAS]"
if [ "$engine" = verl ] && "$VENV/bin/python" -c "import trl" 2>/dev/null; then
  echo "setup.sh: trl is importable in $VENV; verl cannot build a model next to TRL 1.16" >&2; exit 1
fi
"$VENV/bin/python" - "$route" "$VENV" <<'EOF'
import sys

import torch

route, venv, cuda = sys.argv[1], sys.argv[2], torch.version.cuda
print(f"costaware installed in {venv}: torch {torch.__version__} ({'CUDA ' + cuda if cuda else 'CPU-only build'}),"
      f" GPU visible: {torch.cuda.is_available()}")
if route == "cuda" and not cuda:
    print("setup.sh: warning: the GPU route installed a CPU-only torch (a local CPU wheel took precedence?)")
EOF
