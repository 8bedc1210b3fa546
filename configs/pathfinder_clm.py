r"""LRA Pathfinder with causal next-pixel self-pretraining (256-way cross-entropy on the 8-bit value,
as the masked config's loss; L1 on the normalised value with --config.pretrain.pixel_loss=l1), then
causal fine-tuning on the last pixel.

  python main.py --config=configs/pathfinder_clm.py --workdir=runs/pathfinder_clm
  python main.py --config=configs/pathfinder_clm.py:smoke --workdir=/tmp/pathfinder_clm_smoke
  python main.py --config=configs/pathfinder_clm.py:cpu --workdir=runs/pathfinder_clm_cpu

configs/pathfinder_spt.py (Amos et al.'s Pathfinder settings, docs/configs.md#pathfinder) with
`pretrain.objective='clm'` (spt_jax/objectives/causal.py: next-pixel prediction in raster order)
and, for fine-tuning, `model.causal=True`, `model.pooling='last'` (Amos et al.'s causal setting).
"""
from spt_jax import config_lib


def get_config(arg=None):
  config = config_lib.load_config("configs/pathfinder_spt.py" + (f":{arg}" if arg else ""))
  config.pretrain = config_lib.switch_objective(config.pretrain, "clm")
  config.model.update(causal=True, pooling="last")
  return config
