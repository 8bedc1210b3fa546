r"""Synthetic proximity task with causal-LM self-pretraining (Amos et al.'s second SPT objective).

  python main.py --config=configs/synthetic_clm.py --workdir=runs/synthetic_clm
  python main.py --config=configs/synthetic_clm.py:smoke --workdir=/tmp/syn_clm_smoke

configs/synthetic_spt.py with `pretrain.objective='clm'` (spt_jax/objectives/causal.py): next-token
prediction with causal attention for the same steps, learning rate and warmup as masked SPT; the
fine-tuning phase is the same as after masked SPT (bidirectional attention, mean pooling), so the two
SPT arms differ in their pretraining objective only. `--config.model.causal=True
--config.model.pooling=last` fine-tunes causally on the last position instead, as Amos et al. do.
"""
from spt_jax import config_lib


def get_config(arg=None):
  config = config_lib.load_config("configs/synthetic_spt.py" + (f":{arg}" if arg else ""))
  config.pretrain = config_lib.switch_objective(config.pretrain, "clm")
  return config
