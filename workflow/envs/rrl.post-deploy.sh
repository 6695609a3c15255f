#!/usr/bin/env bash
# Runs once after snakemake creates the conda environment, in the workflow's working
# directory (the repository root): install the project into it. On GPU machines torch keeps
# the CUDA build that pip resolves; on CPU-only machines add the `cpu` extra.
set -euo pipefail
python -m pip install -e ".[gpu]"
