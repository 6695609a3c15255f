#!/usr/bin/env bash
# One command for a GPU machine without network access, within 10 minutes: both GPU checks,
# so that a machine that runs one short command can answer both.
#
#   1. benchmarks/rollout_gpu.py: the static engine's correctness against the HF engine on the
#      GPU, then its new tokens/s with CUDA graphs (then compiled) at 64 and 256 rows against
#      the HF engine; stopped after ROLLOUT_SECONDS (default 180): it rewrites its JSON after
#      each measurement, so what was measured by then is kept;
#   2. tools/gpu/gpu_study.sh: every family of the gpu_math DAG at reduced size on the
#      random-init Qwen2.5-Math-1.5B, then the full-size GRPO step if time is left, within
#      what is left of TOTAL_SECONDS (default 560).
#
# Beforehand, with network:  .venv/bin/python tools/gpu/gpu_study.py prepare   # fills .gpu_study/
# On the GPU machine:        bring the checkout with .gpu_study/, set OUT, then
#                            bash tools/gpu/gpu_offline_session.sh             # files into $OUT
# The same code on CPU:      PYTHON=.venv/bin/python bash tools/gpu/gpu_offline_session.sh --tiny --out DIR
#
# $OUT receives 7 files: rollout_gpu_<date>.json/.log, gpu_study.json, gpu_study.log,
# snakemake.log, full_step.log, results.tar.gz (docs/gpu.md says what each holds).
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
tiny=()
out=${OUT:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --tiny) tiny=(--tiny) ;;
    --out) out=${2:?--out needs a folder}; shift ;;
    *) echo "gpu_offline_session: unknown argument '$1' (takes --tiny, --out DIR)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$out" ] || { echo "gpu_offline_session: no output folder: set OUT or pass --out DIR" >&2; exit 2; }
mkdir -p "$out"
total=${TOTAL_SECONDS:-560}
rollout=${ROLLOUT_SECONDS:-180}
start=$SECONDS
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

echo "[gpu_offline_session] rollout_gpu.py for at most ${rollout} s"
timeout --kill-after=10 "$rollout" "$PY" benchmarks/rollout_gpu.py --out "$out" "${tiny[@]}"
rc_rollout=$?
[ $rc_rollout -eq 124 ] && echo "[gpu_offline_session] rollout_gpu.py stopped at ${rollout} s (its JSON holds what it measured)"

left=$((total - (SECONDS - start)))
echo "[gpu_offline_session] gpu_study.sh with ${left} s of budget"
PYTHON="$PY" bash tools/gpu/gpu_study.sh "${tiny[@]}" --out "$out" --budget-seconds "$left"
rc_study=$?

echo "[gpu_offline_session] rollout_gpu rc ${rc_rollout}, gpu_study rc ${rc_study}, $((SECONDS - start)) s in all"
[ $rc_rollout -eq 0 ] && [ $rc_study -eq 0 ]
