r"""LRA Image (CIFAR-10, grayscale, 1024 pixels as continuous 2-channel inputs; --config.data.representation=tokens for LRA's 256 tokens), from scratch (the fine-tuning phase of image_spt.py from a random initialisation).

  python main.py --config=configs/image_scratch.py --workdir=runs/image_scratch
  python main.py --config=configs/image_scratch.py:smoke --workdir=/tmp/image_scratch_smoke

Data: TFDS cifar10 prepared in array_record format under --config.data.data_dir; val = last 10% of train.
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024), as in
docs/configs.md#image, row by row with the source of each value (spt_jax/lra_table.py: the paper
for masking rates and learning rates, their code at file:line for the rest).
"""
from spt_jax import config_lib


def get_config(arg=None):
  return config_lib.lra_config("image", with_spt=False, arg=arg)
