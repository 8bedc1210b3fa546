r"""LRA Pathfinder (32x32, contour length 14, 1024 pixels), with self-pretraining (masked reconstruction on the task's own inputs), then fine-tuning.

  python main.py --config=configs/pathfinder_spt.py --workdir=runs/pathfinder_spt
  python main.py --config=configs/pathfinder_spt.py:smoke --workdir=/tmp/pathfinder_spt_smoke

Data: generated once into ~/.cache/spt_jax (spt_jax/data/pathfinder.py), or the LRA release via --config.data.data_dir=/path/to/lra_release (holding pathfinder32/).
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024), App. C, as tabulated in
spt_jax/config_lib.py (LRA["pathfinder"]): model size, batch sizes, epochs, learning rates, masking rate
and pooling; AdamW (0.9, 0.999), linear warmup then constant, pre-LN, sinusoidal positions, dropout 0.
"""
from spt_jax import config_lib


def get_config(arg=None):
  return config_lib.lra_config("pathfinder", with_spt=True, arg=arg)
