r"""ListOps from scratch: the fine-tuning of listops_spt.py, from a random initialisation.

  python main.py --config=configs/listops_scratch.py --workdir=runs/listops_scratch
  python main.py --config=configs/listops_scratch.py:smoke --workdir=/tmp/scratch_smoke

Hyperparameters: the fine-tuning phase of configs/listops_spt.py (Amos et al. 2024, App. C), so the two
runs differ only in the initialisation. Fresh initialisations are keyed by (seed, phase name), so this
run's initial parameters equal the non-loaded part of the SPT run's fine-tuning initialisation.
"""
from spt_jax import config_lib


def get_config(arg=None):
  config = config_lib.ml_collections.ConfigDict()
  config.seed = 0
  config.phases = "finetune"
  config.data = config_lib.listops_data()
  config.model = config_lib.transformer_config()
  config.finetune = config_lib.listops_finetune()
  config_lib.apply_variant(config, arg, __file__)
  return config
