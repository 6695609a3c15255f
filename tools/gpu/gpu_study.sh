#!/usr/bin/env bash
# The gpu_math study on one GPU (see tools/gpu/gpu_study.py for what it runs and writes).
#
# Here, once (network):  .venv/bin/python tools/gpu/gpu_study.py prepare   # fills .gpu_study/
# On the GPU machine (.gpu_study carried, $OUT set), as one command:
#   bash tools/gpu/gpu_study.sh [--budget-seconds 540]
# On any machine, the same code at toy size on CPU:
#   PYTHON=.venv/bin/python bash tools/gpu/gpu_study.sh --tiny --out /tmp/gpu_study
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
case " $* " in
  *" --tiny "*) ;;  # CPU check: the environment has everything; the wheels are for Python 3.12
  *)
    if [ -d .gpu_study/wheels ]; then
      "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/gpu_study_site .gpu_study/wheels/*.whl || { echo "wheel install failed"; exit 3; }
      export PYTHONPATH=/tmp/gpu_study_site${PYTHONPATH:+:$PYTHONPATH}
      export PATH=/tmp/gpu_study_site/bin:$PATH
    else
      echo "no .gpu_study/wheels: run 'python tools/gpu/gpu_study.py prepare' here first" >&2
    fi
    ;;
esac
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
exec "$PY" tools/gpu/gpu_study.py run "$@"
