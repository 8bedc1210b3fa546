r"""Toy event sequences (spt_jax/data/markov_events.py): fine-tuning from a random initialisation.

  python main.py --config=configs/markov_scratch.py --workdir=runs/markov_scratch
  python main.py --config=configs/markov_scratch.py:smoke --workdir=/tmp/markov_scratch_smoke

The fine-tuning phase of configs/markov_spt.py (data, model, 1,500 steps at lr 5e-4), without SPT.
"""
from spt_jax import config_lib


def get_config(arg=None):
  # configs/markov_spt.py is the single source of truth; only the pretraining is dropped.
  config = config_lib.load_config("configs/markov_spt.py")
  config.phases = "finetune"
  del config.pretrain
  config.finetune.init_from.update(source="", exclude=())
  config_lib.apply_variant(config, arg, __file__)
  return config
