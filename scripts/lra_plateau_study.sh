#!/usr/bin/env bash
# The LRA-at-CPU-scale study with plateau budgets (configs/sweeps/lra_plateau.py, docs/lra_cpu.md),
# breadth first, in the issue's order of what matters: the decisive stages (a, b) at every seed on
# both tasks before anything else, so that every session's hours go where the answers are.
#   pass 1  seeds 0-2: (a) SPT vs scratch vs compute-matched scratch, (b) scratch with built-in
#           proximity biases; Pathfinder, then ListOps
#   pass 2  seeds 0-2: (d) Pathfinder's loaded and frozen attention, ahead of more seeds of a and
#           b: at three seeds those separate their arms already, while the claims that d tests
#           (W_Q, W_K alone; freezing random attention) were undecided; then (lr) Pathfinder's
#           fine-tuning learning rate, both arms alike: does SPT's gain survive each arm's best?
#   pass 3  Pathfinder's seeds 3-4 (ListOps has 3 seeds) of stages a and b, then of stage d
#           (whose freezing verdict split 2 to 1 at three seeds; ~3 process-hours)
#   pass 4  the init-scale study on Pathfinder (configs/sweeps/init_scales.py, docs/theory.md),
#           which fine-tunes this study's SPT checkpoints; its report after each of its sweeps
#           (measured from checkpoints, kept in each run for the records)
#   pass 5  seeds 0-2: (c) SPT with those biases; Pathfinder, then ListOps; then Pathfinder's
#           seeds 3-4 of c
#   pass 6  seeds 0-2: (e) one layer, and SPT on other data, whose fixed-budget verdicts the
#           plateau could change
# A task's stages of one pass share a queue (`a+b`: a's runs first), so no core waits for another
# stage's last run.
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

sweep() {  # config workdir [seeds]
  local extra=() status=0
  [[ -n "${3:-}" ]] && extra=(--config.seeds="$3")
  # One XLA thread per run's core: the study began so, and a run resumes bit-identically only
  # with the thread count it started with.
  python -m spt_jax.sweep --config="$1" "${extra[@]}" --workdir="$2" --processes="$PROCESSES" \
      --run_threads=slot || status=$?
  # Each finished run's attention row, while its checkpoints exist (the records keep the rows,
  # not the checkpoints).
  python scripts/lra_plateau_attention.py --workdir="$WORKDIR" --task="$(basename "$2")" \
      --out="$2/attention" || echo "warning: the attention rows of $2 failed; the study goes on"
  if [[ "$1" == *init_scales.py:* ]]; then  # its PR/ENSD rows too, kept in each run for the records
    local variant=${1##*:}
    python scripts/init_scales_report.py --sweep="$1" --workdir="$2" \
        --out="$2/init_scales_report/${variant//,/_}" \
        || echo "warning: the init-scale rows of $2 failed; the study goes on"
  fi
  python scripts/run_records.py save --workdir="$WORKDIR" --to="$RECORDS"
  return "$status"
}

# Several stages of a task go through one queue ('a+b'), so that no core idles while the other
# finishes a stage's last run; the stages' own tables follow (their runs found finished).
stages() {  # task stages [seeds]
  local stage
  for stage in "$2" $([[ "$2" == *+* ]] && echo "${2//+/ }"); do
    sweep "configs/sweeps/lra_plateau.py:$1,$stage" "$WORKDIR/$1" "${3:-}"
  done
}

for task in pathfinder listops; do stages "$task" a+b "$FIRST_SEEDS"; done
stages pathfinder d+lr "$FIRST_SEEDS"
stages pathfinder a+b
stages pathfinder d
# The init-scale study (docs/theory.md) fine-tunes this study's Pathfinder SPT checkpoints.
for variant in pathfinder pathfinder,data; do
  sweep "configs/sweeps/init_scales.py:$variant" "$WORKDIR/pathfinder"
done
stages pathfinder c "$FIRST_SEEDS"
stages listops c "$FIRST_SEEDS"
stages pathfinder c
stages pathfinder e "$FIRST_SEEDS"
stages listops e "$FIRST_SEEDS"
