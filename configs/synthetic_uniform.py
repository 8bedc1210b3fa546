r"""Synthetic task, composite self-pretraining with the raw-sum baseline (uniform weights on the raw
losses), GraP's start point.

  python main.py --config=configs/synthetic_uniform.py --workdir=runs/synthetic_uniform
  python main.py --config=configs/synthetic_uniform.py:smoke --workdir=/tmp/syn_uniform_smoke
  python main.py --config=configs/synthetic_uniform.py:count,cpu --workdir=runs/count_uniform_cpu

Identical to configs/synthetic_grap.py (same heads mlm, span, contrastive, random; same data, model,
optimiser, fine-tuning and variants) except `pretrain.composite.weighting='raw_sum'`: the encoder's
gradient is the plain sum of the losses' gradients and no labels are read during pretraining. The
other uniform baseline, every loss's EMA-normalised gradient at weight 1, is
`--config.pretrain.composite.weighting=equal_norm`.
"""
from spt_jax import config_lib


def get_config(arg=None):
  # The GraP config is the single source of truth; only the weighting differs.
  return config_lib.load_config("configs/synthetic_grap.py" + (f":{arg}" if arg else ""),
                                weighting="raw_sum")
