r"""LRA Text (IMDB reviews, byte level, length 4096), with self-pretraining (masked reconstruction on the task's own inputs), then fine-tuning.

  python main.py --config=configs/text_spt.py --workdir=runs/text_spt
  python main.py --config=configs/text_spt.py:smoke --workdir=/tmp/text_spt_smoke

Data: TFDS imdb_reviews prepared in array_record format under --config.data.data_dir (default ~/tensorflow_datasets).
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024), App. C, as tabulated in
spt_jax/config_lib.py (LRA["text"]): model size, batch sizes, epochs, learning rates, masking rate
and pooling; AdamW (0.9, 0.999), linear warmup then constant, pre-LN, sinusoidal positions, dropout 0.
"""
from spt_jax import config_lib


def get_config(arg=None):
  return config_lib.lra_config("text", with_spt=True, arg=arg)
