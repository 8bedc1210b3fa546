r"""LRA Text (IMDB reviews, byte level, length 4096), from scratch (the fine-tuning phase of text_spt.py from a random initialisation).

  python main.py --config=configs/text_scratch.py --workdir=runs/text_scratch
  python main.py --config=configs/text_scratch.py:smoke --workdir=/tmp/text_scratch_smoke

Data: TFDS imdb_reviews prepared in array_record format under --config.data.data_dir (default ~/tensorflow_datasets).
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024), as in
docs/configs.md#text, row by row with the source of each value (spt_jax/lra_table.py: the paper
for masking rates and learning rates, their code at file:line for the rest).
"""
from spt_jax import config_lib


def get_config(arg=None):
  return config_lib.lra_config("text", with_spt=False, arg=arg)
