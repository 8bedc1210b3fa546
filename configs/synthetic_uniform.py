r"""Synthetic proximity task, composite self-pretraining with uniform loss weights (GraP's baseline).

  python main.py --config=configs/synthetic_uniform.py --workdir=runs/synthetic_uniform
  python main.py --config=configs/synthetic_uniform.py:smoke --workdir=/tmp/syn_uniform_smoke
  python main.py --config=configs/synthetic_uniform.py:cpu --workdir=runs/syn_uniform_cpu

Identical to configs/synthetic_grap.py (same heads mlm, span, contrastive, random; same data, model,
optimiser and fine-tuning) except `pretrain.composite.weighting='uniform'`: every head loss enters
with weight 1 and no labels are read during pretraining.
"""
import importlib.util
import os


def get_config(arg=None):
  # The GraP config is the single source of truth; only the weighting differs.
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "synthetic_grap.py")
  spec = importlib.util.spec_from_file_location("synthetic_grap", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg, weighting="uniform")
