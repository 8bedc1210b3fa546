r"""Does the SPT gain need depth? SPT vs scratch with 1, 2 (and 4) layers on the synthetic task.

  python -m spt_jax.sweep --config=configs/sweeps/depth.py:cpu --workdir=runs/sweep_depth_cpu
"""
from spt_jax.config_lib import sweep_config


def get_config(arg=None):
  depths = (1, 2) if arg == "cpu" else (1, 2, 4)
  runs = []
  for d in depths:
    runs += [f"spt_{d}L: model.num_layers={d}", f"scratch_{d}L: model.num_layers={d} phases=finetune finetune.init_from.source="]
  return sweep_config(base="configs/synthetic_spt.py" + (":cpu" if arg == "cpu" else ""),
                      runs=runs, seeds=(0, 1) if arg == "cpu" else (0, 1, 2),
                      title="SPT vs scratch by depth")
