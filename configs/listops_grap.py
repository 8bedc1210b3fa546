r"""ListOps, composite self-pretraining weighted by GraP (mlm, span and a useless random-target loss),
then fine-tuning: the GraP ablation on an LRA task whose label a pooled linear probe can partly read.

  python main.py --config=configs/listops_grap.py --workdir=runs/listops_grap
  python main.py --config=configs/listops_grap.py:smoke --workdir=/tmp/listops_grap_smoke
  python main.py --config=configs/listops_grap.py:smoke --workdir=/tmp/lg --config.phases=pretrain \
    --config.pretrain.num_steps=1000 --config.pretrain.grap.ema=0.99 \
    --config.pretrain.grap.warmup_updates=100          # the run in docs/grap.md

Model, data, masking rate (10%) and fine-tuning are configs/listops_spt.py's (Amos et al.'s ListOps
settings); the pretraining phase is objective 'composite' (spt_jax/objectives/composite/) with GraP's
downstream probe trained on the training labels. The fine-tune loads the encoder and leaves every
`pretrain_heads/` parameter behind.
"""
from spt_jax import config_lib, sweep

# The pretraining settings carried over from listops_spt.py into the composite phase.
_CARRIED = ("mask_rate", "learning_rate", "num_epochs", "warmup_steps", "weight_decay",
            "weight_decay_on", "eval_every_steps", "checkpoint_every_steps")


def get_config(arg=None):
  # configs/listops_spt.py is the single source of truth; only the pretraining objective differs.
  config = sweep.load_config("configs/listops_spt.py")
  config.pretrain = config_lib.phase_config("composite",
                                           **{k: config.pretrain[k] for k in _CARRIED})
  config.pretrain.composite.update(losses=("mlm", "span", "random"), weighting="grap")
  config.finetune.init_from.exclude = ("pretrain_heads/.*",)
  config_lib.apply_variant(config, arg, __file__)
  return config
