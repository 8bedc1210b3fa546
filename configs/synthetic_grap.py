r"""Synthetic task, composite self-pretraining weighted by GraP, then fine-tuning.

  python main.py --config=configs/synthetic_grap.py --workdir=runs/synthetic_grap
  python main.py --config=configs/synthetic_grap.py:smoke --workdir=/tmp/syn_grap_smoke
  python main.py --config=configs/synthetic_grap.py:count --workdir=runs/count_grap   # count task
  python main.py --config=configs/synthetic_grap.py:count,cpu --workdir=runs/count_grap_cpu \
    --config.pretrain.grap.label_fraction=0.1      # label-leakage ablation: 10% of the labels

Pretraining: objective 'composite' (spt_jax/objectives/composite/) with the heads mlm, span,
contrastive and a deliberately useless random-target loss on one shared encoder output, weighted by
GraP (Karpukhin & Savchenko, 2026: loss logits ascend the alignment of the normalised composite
z-gradient with the gradient of a downstream probe trained on the labelled training examples; the
defaults are the authors': 'sgd' parametrisation, probe with its own Adam).
Model, data, optimiser, masking rate (15%) and the fine-tuning phase are configs/synthetic_spt.py's;
the fine-tune loads the encoder and leaves every `pretrain_heads/` parameter behind.
configs/synthetic_uniform.py is the same run with the raw-sum baseline.

Variants (combine `count` with one of the others, e.g. `count,cpu`):
  count   the count variant of the task (`data.synthetic.count_markers=5`: 5 A/B markers, label = the
          majority), whose label a pooled probe can read; without it, the adjacency task, where it
          cannot (docs/grap.md: the documented negative result)
  smoke, cpu   as configs/synthetic_spt.py (cpu: 5 pretraining epochs, 1,500 fine-tuning steps)
"""
from spt_jax import config_lib

COUNT_MARKERS = 5  # the count task of docs/grap.md


def get_config(arg=None, weighting="grap"):
  variants = config_lib.parse_variants(arg, ("count", "smoke", "cpu"), __file__)
  config = config_lib.ml_collections.ConfigDict()
  config.seed = 0
  config.phases = "pretrain,finetune"
  # The count field only exists in the count variant: a synthetic workdir made before it keeps
  # matching its config.
  config.data = (config_lib.data_config("synthetic", count_markers=COUNT_MARKERS)
                 if "count" in variants else config_lib.data_config("synthetic"))
  config.model = config_lib.transformer_config(num_layers=1, d_model=64, num_heads=4, d_ff=128)
  config.pretrain = config_lib.phase_config(
      "composite", learning_rate=1e-3, num_epochs=10.0, warmup_steps=250, eval_every_steps=250,
      checkpoint_every_steps=500)
  config.pretrain.composite.update(losses=("mlm", "span", "contrastive", "random"),
                                   weighting=weighting)
  config.finetune = config_lib.synthetic_finetune()
  config.finetune.init_from.update(source="pretrain", checkpoint="best", include=(".*",),
                                   exclude=("pretrain_heads/.*",))
  config_lib.apply_variant(config, ",".join(sorted(variants - {"count"})) or None, __file__)
  return config
