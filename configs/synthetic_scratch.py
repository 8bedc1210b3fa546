r"""Synthetic proximity task from scratch: the fine-tuning of synthetic_spt.py from a random init.

  python main.py --config=configs/synthetic_scratch.py --workdir=runs/synthetic_scratch
  python main.py --config=configs/synthetic_scratch.py:smoke --workdir=/tmp/syn_scratch_smoke

Same model, data and fine-tuning hyperparameters as configs/synthetic_spt.py (see its docstring); the
fresh initialisation equals the non-loaded part of the SPT run's (keyed by seed and phase name).
"""
from spt_jax import config_lib


def get_config(arg=None):
  config = config_lib.ml_collections.ConfigDict()
  config.seed = 0
  config.phases = "finetune"
  config.data = config_lib.data_config("synthetic")
  config.model = config_lib.transformer_config(num_layers=1, d_model=64, num_heads=4, d_ff=128)
  config.finetune = config_lib.synthetic_finetune()
  config_lib.apply_variant(config, arg, __file__)
  return config
