r"""Synthetic proximity task, composite self-pretraining with uniform loss weights (GraP's baseline).

  python main.py --config=configs/synthetic_uniform.py --workdir=runs/synthetic_uniform
  python main.py --config=configs/synthetic_uniform.py:smoke --workdir=/tmp/syn_uniform_smoke
  python main.py --config=configs/synthetic_uniform.py:cpu --workdir=runs/syn_uniform_cpu

Identical to configs/synthetic_grap.py (same heads mlm, span, contrastive, random; same data, model,
optimiser and fine-tuning) except `pretrain.composite.weighting='uniform'`: every head loss enters
with weight 1 and no labels are read during pretraining.
"""
from spt_jax import config_lib


def get_config(arg=None):
  # The GraP config is the single source of truth; only the weighting differs.
  return config_lib.load_config("configs/synthetic_grap.py" + (f":{arg}" if arg else ""),
                                weighting="uniform")
