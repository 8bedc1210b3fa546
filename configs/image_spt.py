r"""LRA Image (CIFAR-10, grayscale, 1024 pixels as continuous 2-channel inputs; --config.data.representation=tokens for LRA's 256 tokens), with self-pretraining (masked reconstruction on the task's own inputs), then fine-tuning.

  python main.py --config=configs/image_spt.py --workdir=runs/image_spt
  python main.py --config=configs/image_spt.py:smoke --workdir=/tmp/image_spt_smoke
  python main.py --config=configs/image_spt.py:smoke,from_pathfinder --workdir=/tmp/pf2cifar  # cross-task SPT

Data: TFDS cifar10 prepared in array_record format under --config.data.data_dir; val = last 10% of train.
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024), as in
docs/configs.md#image, row by row with the source of each value (spt_jax/lra_table.py: the paper
for masking rates and learning rates, their code at file:line for the rest).
"""
from spt_jax import config_lib


def get_config(arg=None):
  return config_lib.lra_config("image", with_spt=True, arg=arg)
