#!/usr/bin/env bash
# Builds the wheel and the sdist, installs the wheel with its `trl` extra into a clean virtual
# environment (torch first, the way scripts/setup.sh does: a local CPU wheel, else PyTorch's CPU
# index), and runs the README's quickstart from a folder outside the checkout, so that it imports the
# installed package, not src/. Where .venv-verl exists (scripts/setup.sh --engine verl), the wheel is also
# installed, without its dependencies, into a virtual environment that reads .venv-verl's packages (verl,
# Ray, torch) and not its costaware, and examples/verl/run_cpu.sh runs one tiny step of verl's loop from it.
#
#   bash scripts/check_wheel.sh            # build into dist/, check in a temporary venv
#
# PYTHON picks the interpreter (default python3); COSTAWARE_TORCH_VERSION the torch version;
# KEEP_VENV=1 keeps the temporary folder and prints its path.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
TORCH_VERSION=${COSTAWARE_TORCH_VERSION:-2.13.0}
CPU_INDEX=https://download.pytorch.org/whl/cpu
WORK=$(mktemp -d)
[ "${KEEP_VENV:-0}" = 1 ] && echo "check_wheel.sh: working in $WORK" || trap 'rm -rf "$WORK"' EXIT

# 1. build: an isolated build venv, so the checkout's environment cannot leak into the artefacts
"$PY" -m venv "$WORK/build"
"$WORK/build/bin/python" -m pip install -q --upgrade pip build
rm -rf dist
"$WORK/build/bin/python" -m build --outdir dist . >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; exit 1; }
WHEEL=$(ls dist/costaware-*-py3-none-any.whl)
SDIST=$(ls dist/costaware-*.tar.gz)
echo "check_wheel.sh: built $WHEEL and $SDIST"
LISTING=$(tar -tzf "$SDIST")  # listed once: grep -q on a pipe would cut tar off under pipefail
for f in LICENSE README.md CHANGELOG.md CITATION.cff pyproject.toml mkdocs.yml docs/index.md \
  docs/stylesheets/extra.css scripts/griffe_rst.py; do
  grep -qx "costaware-[^/]*/$f" <<<"$LISTING" || { echo "check_wheel.sh: $f missing from $SDIST" >&2; exit 1; }
done
"$WORK/build/bin/python" - "$WHEEL" <<'PYEOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
need = ["costaware/py.typed", "costaware/integrations/trl/trainer.py", "costaware/cli.py",
        "costaware/integrations/verl/cpu/run.py", "costaware/integrations/verl/cpu/patches.py"]
missing = [n for n in need if n not in names]
assert not missing and not any(n.startswith(("tests/", "examples/")) for n in names), missing
assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "LICENSE not in the wheel"
PYEOF

# 2. a clean venv: torch first, then the wheel with its trl extra
"$PY" -m venv "$WORK/venv"
PIP=("$WORK/venv/bin/python" -m pip)
"${PIP[@]}" install -q --upgrade pip
if "${PIP[@]}" install -q --no-index --no-deps "torch==$TORCH_VERSION" 2>/dev/null; then
  "${PIP[@]}" install -q "torch==$TORCH_VERSION"
else
  "${PIP[@]}" install -q "torch==$TORCH_VERSION" --index-url "$CPU_INDEX"
fi
"${PIP[@]}" install -q "$WHEEL[trl]"

# 3. the README's quickstart, from outside the checkout
mkdir -p "$WORK/run"
"$WORK/venv/bin/python" - "$ROOT/README.md" >"$WORK/run/quickstart.py" <<'PYEOF'
import re, sys
blocks = re.findall(r"^```python\n(.*?)^```", open(sys.argv[1]).read(), re.S | re.M)
print(next(b for b in blocks if "CostAwareGRPOTrainer" in b))
PYEOF
cd "$WORK/run"
OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 "$WORK/venv/bin/python" - <<'PYEOF'
import costaware
assert "site-packages" in costaware.__file__, costaware.__file__  # the installed wheel, not src/
print(f"check_wheel.sh: costaware {costaware.__version__} from {costaware.__file__}")
PYEOF
OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 "$WORK/venv/bin/python" quickstart.py 2>&1 | tail -3
"$WORK/venv/bin/costaware" --help >/dev/null
echo "check_wheel.sh: the wheel installs with its trl extra and the quickstart runs from it"

# 4. verl's CPU example from the wheel, in the verl environment (verl cannot build a model beside TRL)
if [ -x "$ROOT/.venv-verl/bin/python" ]; then
  "$ROOT/.venv-verl/bin/python" -m venv "$WORK/verl"
  VERL_SITE=$("$ROOT/.venv-verl/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  WHEEL_SITE=$("$WORK/verl/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  # a path line, not a site dir: .venv-verl's own .pth files (its editable costaware) are not read
  echo "$VERL_SITE" >"$WHEEL_SITE/zz_costaware_check_verl.pth"
  "$WORK/verl/bin/python" -m pip install -q --no-deps "$ROOT/$WHEEL"
  env -u PYTHONPATH "$WORK/verl/bin/python" - "$WORK" <<'PYEOF'
import sys, costaware.integrations.verl.cpu.run as run, verl
assert run.__file__.startswith(sys.argv[1]), run.__file__  # the installed wheel, not src/
print(f"check_wheel.sh: verl {verl.__version__}, {run.__name__} from {run.__file__}")
PYEOF
  env -u PYTHONPATH OUT="$WORK/verl_run" PYTHON="$WORK/verl/bin/python" METHOD=p_star \
    bash "$ROOT/examples/verl/run_cpu.sh" --steps 1 --batch 2 --mini 1 --micro 4 --sft-steps 50 \
    +algorithm.cost_aware.seed=1 \
    >"$WORK/verl_run.out" 2>&1 || { tail -40 "$WORK/verl_run.out"; exit 1; }
  grep -q '"cost_aware/total/tokens"' "$WORK/verl_run.out" || { tail -40 "$WORK/verl_run.out"; exit 1; }
  echo "check_wheel.sh: examples/verl/run_cpu.sh ran verl's loop from the installed wheel"
else
  echo "check_wheel.sh: no .venv-verl (bash scripts/setup.sh --engine verl): the verl CPU example was not run"
fi
