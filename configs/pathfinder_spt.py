r"""LRA Pathfinder (32x32, contour length 14, 1024 pixels), with self-pretraining (masked reconstruction on the task's own inputs), then fine-tuning.

  python main.py --config=configs/pathfinder_spt.py --workdir=runs/pathfinder_spt
  python main.py --config=configs/pathfinder_spt.py:smoke --workdir=/tmp/pathfinder_spt_smoke

Data: generated once into ~/.cache/spt_jax (spt_jax/data/pathfinder.py), or the LRA release via --config.data.data_dir=/path/to/lra_release (holding pathfinder32/).
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024), as in
docs/configs.md#pathfinder, row by row with the source of each value (spt_jax/lra_table.py: the paper
for masking rates and learning rates, their code at file:line for the rest).
"""
from spt_jax import config_lib


def get_config(arg=None):
  return config_lib.lra_config("pathfinder", with_spt=True, arg=arg)
