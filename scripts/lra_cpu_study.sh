#!/bin/bash
# The LRA-at-CPU-scale study (docs/lra_cpu.md): every sweep of configs/sweeps/lra_cpu.py for both
# tasks, in the order, then the attention analysis. Each sweep skips finished runs and
# resumes an interrupted one, so re-running this after a kill (or in a later session) continues.
#   scripts/lra_cpu_study.sh [RUNS_DIR]        (default runs/lra_cpu; run from the repository root)
set -u
RUNS=${1:-runs/lra_cpu}
mkdir -p "$RUNS"
analyse() {  # sweep 7: attention of every seed's SPT and scratch checkpoints, then the table
  local W=$RUNS/$1
  for seed in 0 1 2; do
    for run in spt/seed_$seed/pretrain spt/seed_$seed/finetune scratch/seed_$seed/finetune; do
      [ -d "$W/$run" ] && [ ! -f "$W/attention/${run//\//_}/metrics.json" ] && \
        python -m spt_jax.analysis --run="$W/$run" --out="$W/attention/${run//\//_}" \
          >> "$W/attention.log" 2>&1
    done
    [ -d "$W/scratch/seed_$seed/finetune" ] && \
      [ ! -f "$W/attention/scratch_seed_${seed}_init/metrics.json" ] && python -m spt_jax.analysis \
        --run="$W/scratch/seed_$seed/finetune" --checkpoint=init \
        --out="$W/attention/scratch_seed_${seed}_init" >> "$W/attention.log" 2>&1
  done
  python scripts/attention_table.py --dir="$W/attention" > "$W/attention/table.md"
}
# Pathfinder's ablations come first: it is the task where SPT beats scratch at this scale, so it
# is where an ablation has a gain to take apart.
for step in "listops spt_vs_scratch" "pathfinder spt_vs_scratch" "listops analysis" \
            "pathfinder analysis" "listops hybrid_init" "pathfinder hybrid_init" \
            "pathfinder freezing" "pathfinder depth" "pathfinder pretrain_length" \
            "pathfinder cross_task" "listops freezing" "listops depth" "listops pretrain_length" \
            "listops cross_task"; do
  set -- $step
  if [ "$2" = analysis ]; then analyse "$1"; continue; fi
  echo "$(date -u +%FT%T) start $1 $2" >> "$RUNS/study.log"
  python -m spt_jax.sweep --config="configs/sweeps/lra_cpu.py:$1,$2" --workdir="$RUNS/$1" \
    --processes=2 > "$RUNS/$1_$2.log" 2>&1
  echo "$(date -u +%FT%T) end $1 $2 exit $?" >> "$RUNS/study.log"
done
