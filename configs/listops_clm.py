r"""LRA ListOps with causal-LM self-pretraining (next-token prediction, causal attention), then
causal fine-tuning on the last position, as Amos et al.'s causal SPT.

  python main.py --config=configs/listops_clm.py --workdir=runs/listops_clm
  python main.py --config=configs/listops_clm.py:smoke --workdir=/tmp/listops_clm_smoke
  python main.py --config=configs/listops_clm.py:cpu --workdir=runs/listops_clm_cpu

configs/listops_spt.py (Amos et al.'s ListOps settings, docs/configs.md#listops) with
`pretrain.objective='clm'` (spt_jax/objectives/causal.py) and, for fine-tuning, `model.causal=True`
and `model.pooling='last'` (Amos et al.: "last-token for causal"; research brief §1). Their paper
reports causal SPT within about a point of masked SPT with the same optimiser settings, which are
kept here. `--config.model.causal=False --config.model.pooling=mean` fine-tunes bidirectionally.
"""
from spt_jax import config_lib


def get_config(arg=None):
  config = config_lib.load_config("configs/listops_spt.py" + (f":{arg}" if arg else ""))
  config.pretrain = config_lib.switch_objective(config.pretrain, "clm")
  config.model.update(causal=True, pooling="last")
  return config
