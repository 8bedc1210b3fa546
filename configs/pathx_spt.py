r"""LRA Path-X (Pathfinder 128x128, contour length 14, length 16,384; block-local attention), with self-pretraining (masked reconstruction on the task's own inputs), then fine-tuning.

  python main.py --config=configs/pathx_spt.py --workdir=runs/pathx_spt
  python main.py --config=configs/pathx_spt.py:smoke --workdir=/tmp/pathx_spt_smoke

Data: generated once into ~/.cache/spt_jax, or the LRA release via --config.data.data_dir (holding pathfinder128/).
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024), App. C, as tabulated in
spt_jax/config_lib.py (LRA["pathx"]): model size, batch sizes, epochs, learning rates, masking rate
and pooling; AdamW (0.9, 0.999), linear warmup then constant, pre-LN, sinusoidal positions, dropout 0.
"""
from spt_jax import config_lib


def get_config(arg=None):
  return config_lib.lra_config("pathx", with_spt=True, arg=arg)
