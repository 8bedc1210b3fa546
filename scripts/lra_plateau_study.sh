#!/usr/bin/env bash
# The LRA-at-CPU-scale study with plateau budgets (configs/sweeps/lra_plateau.py, docs/lra_cpu.md):
# every stage of both tasks, in the order the study is decided (a: SPT vs scratch vs compute-matched
# scratch; b: scratch with built-in proximity biases; c: SPT with them; d: Pathfinder's ablations).
# Re-running it resumes: finished runs are skipped, killed ones resume from their last checkpoint.
#
#   scripts/lra_plateau_study.sh [WORKDIR]      # default ~/spt_runs/lra_plateau; 2 processes, one per core
set -euo pipefail
cd "$(dirname "$0")/.."
WORKDIR=${1:-$HOME/spt_runs/lra_plateau}
PROCESSES=${PROCESSES:-2}
for stage in a b c; do
  for task in pathfinder listops; do
    python -m spt_jax.sweep --config="configs/sweeps/lra_plateau.py:$task,$stage" \
        --workdir="$WORKDIR/$task" --processes="$PROCESSES"
  done
done
python -m spt_jax.sweep --config=configs/sweeps/lra_plateau.py:pathfinder,d \
    --workdir="$WORKDIR/pathfinder" --processes="$PROCESSES"
