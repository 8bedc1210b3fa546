r"""LRA ListOps from scratch: the fine-tuning of listops_spt.py, from a random initialisation.

  python main.py --config=configs/listops_scratch.py --workdir=runs/listops_scratch
  python main.py --config=configs/listops_scratch.py:smoke --workdir=/tmp/scratch_smoke

Hyperparameters: the fine-tuning phase of configs/listops_spt.py (docs/configs.md#listops), so the two
runs differ only in the initialisation. Fresh initialisations are keyed by (seed, phase name), so this
run's initial parameters equal the non-loaded part of the SPT run's fine-tuning initialisation.
"""
from spt_jax import config_lib


def get_config(arg=None):
  return config_lib.lra_config("listops", with_spt=False, arg=arg)
