r"""LRA Text (IMDB reviews, byte level, length 4096), from scratch (the fine-tuning phase of text_spt.py from a random initialisation).

  python main.py --config=configs/text_scratch.py --workdir=runs/text_scratch
  python main.py --config=configs/text_scratch.py:smoke --workdir=/tmp/text_scratch_smoke

Data: TFDS imdb_reviews prepared in array_record format under --config.data.data_dir (default ~/tensorflow_datasets).
Hyperparameters: the fine-tuning phase of configs/text_spt.py (Amos et al.'s settings,
each with its source there; docs/configs.md#text), so the two runs differ only in the
initialisation.
"""
from spt_jax import config_lib


def get_config(arg=None):
  config_lib.parse_variants(arg, ("smoke",), "configs/text_scratch.py")
  config = config_lib.load_config("configs/text_spt.py" + (f":{arg}" if arg else ""))
  config.phases = "finetune"
  del config.pretrain
  config.finetune.init_from.source = ""  # a random initialisation
  return config
