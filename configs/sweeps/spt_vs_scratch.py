r"""The headline comparison: synthetic_spt.py vs synthetic_scratch.py over seeds, with fine-tune steps
until 90% validation accuracy.

  python -m spt_jax.sweep --config=configs/sweeps/spt_vs_scratch.py --workdir=runs/spt_vs_scratch
"""
from spt_jax.config_lib import sweep_config


def get_config(arg=None):
  base = "configs/synthetic_spt.py" + (f":{arg}" if arg else "")
  return sweep_config(base=base, runs=["spt:", "scratch: config=configs/synthetic_scratch.py" +
                                       (f":{arg}" if arg else "")],
                      seeds=(0, 1, 2), title="Synthetic task: SPT vs from scratch")
