r"""LRA Path-X (Pathfinder 128x128, contour length 14, length 16,384; block-local attention), from scratch (the fine-tuning phase of pathx_spt.py from a random initialisation).

  python main.py --config=configs/pathx_scratch.py --workdir=runs/pathx_scratch
  python main.py --config=configs/pathx_scratch.py:smoke --workdir=/tmp/pathx_scratch_smoke

Data: generated once into ~/.cache/spt_jax, or the LRA release via --config.data.data_dir (holding pathfinder128/).
Hyperparameters: the fine-tuning phase of configs/pathx_spt.py (Amos et al.'s settings,
each with its source there; docs/configs.md#pathx), so the two runs differ only in the
initialisation.
"""
from spt_jax import config_lib


def get_config(arg=None):
  config_lib.parse_variants(arg, ("smoke",), "configs/pathx_scratch.py")
  config = config_lib.load_config("configs/pathx_spt.py" + (f":{arg}" if arg else ""))
  config.phases = "finetune"
  del config.pretrain
  config.finetune.init_from.source = ""  # a random initialisation
  return config
