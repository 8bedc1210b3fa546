#!/usr/bin/env bash
# The LRA-at-CPU-scale study with plateau budgets (configs/sweeps/lra_plateau.py, docs/lra_cpu.md),
# breadth first: the decisive stages at three seeds on both tasks before anything else, so that
# every session's hours go where the answers are.
#   pass 1  seeds 0-2: (a) SPT vs scratch vs compute-matched scratch, (b) scratch with built-in
#           proximity biases; Pathfinder, then ListOps
#   pass 2  seeds 0-2: (c) SPT with those biases, (d) Pathfinder's loaded and frozen attention
#   pass 3  every seed of the sweep config (Pathfinder's seeds 3-4) for all stages
# Re-running it resumes: finished runs are skipped, killed ones resume from their last checkpoint.
# Finished runs are also kept as records in docs/results/lra_plateau/records (scripts/run_records.py;
# RECORDS=dir to keep them elsewhere; commit them): a lost workdir is restored from them first, so only unfinished runs are redone.
#
#   scripts/lra_plateau_study.sh [WORKDIR]      # default ~/spt_runs/lra_plateau; 2 processes, one per core
set -euo pipefail
cd "$(dirname "$0")/.."
WORKDIR=${1:-$HOME/spt_runs/lra_plateau}
PROCESSES=${PROCESSES:-2}
FIRST_SEEDS='(0,1,2)'
RECORDS=${RECORDS:-docs/results/lra_plateau/records}

[[ -d "$RECORDS" ]] && python scripts/run_records.py restore --records="$RECORDS" --workdir="$WORKDIR"

sweep() {  # task stage [seeds]
  local extra=() status=0
  [[ -n "${3:-}" ]] && extra=(--config.seeds="$3")
  python -m spt_jax.sweep --config="configs/sweeps/lra_plateau.py:$1,$2" "${extra[@]}" \
      --workdir="$WORKDIR/$1" --processes="$PROCESSES" || status=$?
  python scripts/run_records.py save --workdir="$WORKDIR" --to="$RECORDS"
  return "$status"
}

for task in pathfinder listops; do
  for stage in a b; do sweep "$task" "$stage" "$FIRST_SEEDS"; done
done
for task in pathfinder listops; do sweep "$task" c "$FIRST_SEEDS"; done
sweep pathfinder d "$FIRST_SEEDS"
for task in pathfinder listops; do
  for stage in a b c; do sweep "$task" "$stage"; done
done
sweep pathfinder d
