#!/usr/bin/env bash
# Creates .venv and installs costaware with every extra. The torch CPU wheel goes in first:
# a bare `torch` requirement with no torch present would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[all,dev]"
echo "costaware installed in .venv"
