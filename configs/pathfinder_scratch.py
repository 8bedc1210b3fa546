r"""LRA Pathfinder (32x32, contour length 14, 1024 pixels), from scratch (the fine-tuning phase of pathfinder_spt.py from a random initialisation).

  python main.py --config=configs/pathfinder_scratch.py --workdir=runs/pathfinder_scratch
  python main.py --config=configs/pathfinder_scratch.py:smoke --workdir=/tmp/pathfinder_scratch_smoke

Data: generated once into ~/.cache/spt_jax (spt_jax/data/pathfinder.py), or the LRA release via --config.data.data_dir=/path/to/lra_release (holding pathfinder32/).
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024), as in
docs/configs.md#pathfinder, row by row with the source of each value (spt_jax/lra_table.py: the paper
for masking rates and learning rates, their code at file:line for the rest).
"""
from spt_jax import config_lib


def get_config(arg=None):
  return config_lib.lra_config("pathfinder", with_spt=False, arg=arg)
