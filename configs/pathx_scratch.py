r"""LRA Path-X (Pathfinder 128x128, contour length 14, length 16,384; block-local attention), from scratch (the fine-tuning phase of pathx_spt.py from a random initialisation).

  python main.py --config=configs/pathx_scratch.py --workdir=runs/pathx_scratch
  python main.py --config=configs/pathx_scratch.py:smoke --workdir=/tmp/pathx_scratch_smoke

Data: generated once into ~/.cache/spt_jax, or the LRA release via --config.data.data_dir (holding pathfinder128/).
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024), as in
docs/configs.md#pathx, row by row with the source of each value (spt_jax/lra_table.py: the paper
for masking rates and learning rates, their code at file:line for the rest).
"""
from spt_jax import config_lib


def get_config(arg=None):
  return config_lib.lra_config("pathx", with_spt=False, arg=arg)
