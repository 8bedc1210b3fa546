r"""LRA Text (IMDB reviews, byte level, length 4096), from scratch (the fine-tuning phase of text_spt.py from a random initialisation).

  python main.py --config=configs/text_scratch.py --workdir=runs/text_scratch
  python main.py --config=configs/text_scratch.py:smoke --workdir=/tmp/text_scratch_smoke

Data: TFDS imdb_reviews prepared in array_record format under --config.data.data_dir (default ~/tensorflow_datasets).
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024), App. C, as tabulated in
spt_jax/config_lib.py (LRA["text"]): model size, batch sizes, epochs, learning rates, masking rate
and pooling; AdamW (0.9, 0.999), linear warmup then constant, pre-LN, sinusoidal positions, dropout 0.
"""
from spt_jax import config_lib


def get_config(arg=None):
  return config_lib.lra_config("text", with_spt=False, arg=arg)
