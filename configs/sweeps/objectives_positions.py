r"""The synthetic comparison: masked vs causal SPT vs from scratch, and sinusoidal vs RoPE vs
ALiBi positions (SPT and scratch), 3 seeds, fine-tune steps to 90% validation and test accuracy.

  python -m spt_jax.sweep --config=configs/sweeps/objectives_positions.py --workdir=runs/obj_pos \
      --processes=2

Every arm is the `cpu` variant of configs/synthetic_{spt,clm,scratch}.py (1-layer Transformer,
5 SPT epochs, 1,500 fine-tuning steps at lr 5e-4; docs/synthetic_task.md) with only the named field
changed: nothing was tuned for any arm. The fine-tuning phase is the same for every arm
(bidirectional attention, mean pooling), so the causal arm differs in its pretraining objective
only; the two `_causalft` arms fine-tune causally on the last position instead (Amos et al.'s
causal setting), causal SPT against scratch with that same classifier.
"""
from spt_jax.config_lib import sweep_config

SPT, CLM, SCRATCH = ("configs/synthetic_spt.py:cpu", "configs/synthetic_clm.py:cpu",
                     "configs/synthetic_scratch.py:cpu")


def get_config(arg=None):
  del arg
  runs = []
  for position in ("sinusoidal", "rope", "alibi"):
    for name, config in (("masked", SPT), ("causal", CLM), ("scratch", SCRATCH)):
      if name == "causal" and position != "sinusoidal":
        continue  # the objective comparison is at the paper's (sinusoidal) positions
      runs.append(f"{name}_{position}: config={config} model.position={position}")
  # Amos et al.'s causal setting: the classifier is causal too and reads the last position; with
  # its own from-scratch baseline, since the fine-tuned architecture differs.
  for name, config in (("causal", CLM), ("scratch", SCRATCH)):
    runs.append(f"{name}_causalft: config={config} model.causal=True model.pooling=last")
  return sweep_config(base=SPT, runs=runs, seeds=(0, 1, 2),
                      title="Synthetic task: SPT objective and position encoding")
