r"""Composite SPT on the synthetic (adjacency) task: GraP weights vs the raw-sum baseline (and plain
SPT), over seeds: the documented negative result (docs/grap.md), where a pooled probe reads nothing.

  python -m spt_jax.sweep --config=configs/sweeps/grap.py:cpu --workdir=runs/sweep_grap_cpu
  python -m spt_jax.sweep --config=configs/sweeps/grap.py --workdir=runs/sweep_grap

Runs: `grap` (configs/synthetic_grap.py), `uniform` (configs/synthetic_uniform.py: weighting
'raw_sum', the plain sum of the losses), both composite (mlm, span, contrastive, random) pretraining
then the same fine-tuning; `spt` is plain masked-token SPT (configs/synthetic_spt.py) for reference.
The GraP sweeps on tasks whose label a probe can read: configs/sweeps/grap_redundancy.py and
configs/sweeps/grap_compare.py. `cpu` uses each config's cpu variant (5 pretraining
epochs, 1500 fine-tuning steps). Metric: fine-tune test accuracy of the best validation checkpoint.
"""
from spt_jax.config_lib import sweep_config


def get_config(arg=None):
  variant = f":{arg}" if arg else ""
  runs = [f"grap: config=configs/synthetic_grap.py{variant}",
          f"uniform: config=configs/synthetic_uniform.py{variant}",
          f"spt: config=configs/synthetic_spt.py{variant}"]
  return sweep_config(base=f"configs/synthetic_grap.py{variant}", runs=runs, seeds=(0, 1, 2),
                      title="Synthetic task: composite SPT weighted by GraP vs uniform")
