#!/usr/bin/env bash
# Make the environment of benchmarks/side_by_side.py: the project installed exactly as
# .ci/install installs it, into its own folder (default .venv-bench), plus TRL. TRL is a
# dependency of this benchmark only, never of the project; it is installed with torch and
# transformers pinned to the versions .ci/install chose, so pip fails instead of swapping them.
#
#   bash benchmarks/side_by_side_env.sh            # .venv-bench, trl 1.16.0
#   VENV=/tmp/bench TRL_VERSION=1.15.0 bash benchmarks/side_by_side_env.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VENV:-.venv-bench}
TRL_VERSION=${TRL_VERSION:-1.16.0}
cd "$ROOT"
# .ci/install's own steps with its folder renamed: one list of install steps to keep current.
script=$(mktemp)
constraints=$(mktemp)
trap 'rm -f "$script" "$constraints"' EXIT
sed -e "s#\.venv#$VENV#g" -e "s#cd \"\$(dirname \"\$0\")/\.\.\"#cd \"$ROOT\"#" .ci/install >"$script"
if grep -q '\.venv/' "$script" || ! grep -q "cd \"$ROOT\"" "$script"; then
  echo "side_by_side_env.sh: .ci/install changed shape; update the renaming above" >&2
  exit 1
fi
bash "$script"
# Keep the folder out of git and of the linters, which read .gitignore files (as python -m venv
# does itself from Python 3.13 on).
echo '*' >"$VENV/.gitignore"
"$VENV/bin/python" -m pip freeze | grep -iE '^(torch|transformers)==' >"$constraints"
"$VENV/bin/python" -m pip install -q -c "$constraints" "trl==$TRL_VERSION"
"$VENV/bin/python" - <<'PY'
import torch, transformers, trl
from trl import GRPOConfig, GRPOTrainer  # noqa: F401  (fails here if TRL does not fit)
print("torch", torch.__version__, "transformers", transformers.__version__, "trl", trl.__version__)
PY
