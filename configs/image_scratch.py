r"""LRA Image (CIFAR-10, grayscale, 1024 pixels as continuous 2-channel inputs; --config.data.representation=tokens for LRA's 256 tokens), from scratch (the fine-tuning phase of image_spt.py from a random initialisation).

  python main.py --config=configs/image_scratch.py --workdir=runs/image_scratch
  python main.py --config=configs/image_scratch.py:smoke --workdir=/tmp/image_scratch_smoke

Data: TFDS cifar10 prepared in array_record format under --config.data.data_dir; val = last 10% of train.
Hyperparameters: the fine-tuning phase of configs/image_spt.py (Amos et al.'s settings,
each with its source there; docs/configs.md#image), so the two runs differ only in the
initialisation.
"""
from spt_jax import config_lib


def get_config(arg=None):
  config_lib.parse_variants(arg, ("smoke",), "configs/image_scratch.py")
  config = config_lib.load_config("configs/image_spt.py" + (f":{arg}" if arg else ""))
  config.phases = "finetune"
  del config.pretrain
  config.finetune.init_from.source = ""  # a random initialisation
  return config
