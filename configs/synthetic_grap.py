r"""Synthetic proximity task, composite self-pretraining weighted by GraP, then fine-tuning.

  python main.py --config=configs/synthetic_grap.py --workdir=runs/synthetic_grap
  python main.py --config=configs/synthetic_grap.py:smoke --workdir=/tmp/syn_grap_smoke
  python main.py --config=configs/synthetic_grap.py:cpu --workdir=runs/syn_grap_cpu \
    --config.pretrain.grap.label_fraction=0.1      # label-leakage ablation: 10% of the labels

Pretraining: objective 'composite' (spt_jax/objectives/composite.py) with the heads mlm, span,
contrastive and a deliberately useless random-target loss on one shared encoder output, weighted by
GraP (Karpukhin & Savchenko, 2026: loss logits ascend the alignment of the normalised composite
z-gradient with the gradient of a downstream probe trained on the labelled training examples).
Model, data, optimiser, masking rate (15%) and the fine-tuning phase are configs/synthetic_spt.py's;
the fine-tune loads the encoder and leaves every `pretrain_heads/` parameter behind.
configs/synthetic_uniform.py is the same run with uniform weights.
"""
from spt_jax import config_lib


def get_config(arg=None, weighting="grap"):
  config = config_lib.ml_collections.ConfigDict()
  config.seed = 0
  config.phases = "pretrain,finetune"
  config.data = config_lib.data_config("synthetic")
  config.model = config_lib.transformer_config(num_layers=1, d_model=64, num_heads=4, d_ff=128)
  config.pretrain = config_lib.composite_phase_config(
      learning_rate=1e-3, num_epochs=10.0, warmup_steps=250, eval_every_steps=250,
      checkpoint_every_steps=500)
  config.pretrain.composite.update(losses=("mlm", "span", "contrastive", "random"),
                                   weighting=weighting)
  config.finetune = config_lib.synthetic_finetune()
  config.finetune.init_from.update(source="pretrain", checkpoint="best", include=(".*",),
                                   exclude=("pretrain_heads/.*",))
  config_lib.apply_variant(config, arg, __file__)
  return config
