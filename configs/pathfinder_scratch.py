r"""LRA Pathfinder (32x32, contour length 14, 1024 pixels), from scratch (the fine-tuning phase of pathfinder_spt.py from a random initialisation).

  python main.py --config=configs/pathfinder_scratch.py --workdir=runs/pathfinder_scratch
  python main.py --config=configs/pathfinder_scratch.py:smoke --workdir=/tmp/pathfinder_scratch_smoke

Data: generated once into ~/.cache/spt_jax (spt_jax/data/pathfinder.py), or the LRA release via --config.data.data_dir=/path/to/lra_release (holding pathfinder32/).
Hyperparameters: the fine-tuning phase of configs/pathfinder_spt.py (Amos et al.'s settings,
each with its source there; docs/configs.md#pathfinder), so the two runs differ only in the
initialisation.
Variants: `smoke`, `cpu` (docs/lra_cpu.md), combinable, as configs/pathfinder_spt.py's.
"""
from spt_jax import config_lib


def get_config(arg=None):
  variants = config_lib.parse_variants(arg, ("smoke", "cpu"), "configs/pathfinder_scratch.py")
  config = config_lib.load_config("configs/pathfinder_spt.py" + (f":{arg}" if arg else ""))
  config.phases = "finetune"
  del config.pretrain
  if "cpu" in variants:
    del config.pretrain_data  # cross-task SPT's data
  config.finetune.init_from.source = ""  # a random initialisation
  return config
