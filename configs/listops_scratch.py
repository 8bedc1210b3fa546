r"""LRA ListOps from scratch: the fine-tuning of listops_spt.py, from a random initialisation.

  python main.py --config=configs/listops_scratch.py --workdir=runs/listops_scratch
  python main.py --config=configs/listops_scratch.py:smoke --workdir=/tmp/scratch_smoke

Hyperparameters: the fine-tuning phase of configs/listops_spt.py (Amos et al.'s settings, each
with its source there; docs/configs.md#listops), so the two runs differ only in the
initialisation. Fresh initialisations are keyed by (seed, phase name), so this run's initial
parameters equal the non-loaded part of the SPT run's fine-tuning initialisation.
Variants: `smoke`, `cpu` (docs/lra_cpu.md), combinable, as configs/listops_spt.py's.
"""
from spt_jax import config_lib


def get_config(arg=None):
  variants = config_lib.parse_variants(arg, ("smoke", "cpu"), "configs/listops_scratch.py")
  config = config_lib.load_config("configs/listops_spt.py" + (f":{arg}" if arg else ""))
  config.phases = "finetune"
  del config.pretrain
  if "cpu" in variants:
    del config.pretrain_data  # cross-task SPT's data
  config.finetune.init_from.source = ""  # a random initialisation
  return config
