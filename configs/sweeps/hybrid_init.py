r"""Which SPT weights carry the gain? Fine-tuning from random init except the listed subtrees,
loaded from the SPT checkpoint: W_Q,W_K (qk); W_Q,W_K,W_V,W_O (qkvo); MLPs; everything; nothing.

  python -m spt_jax.sweep --config=configs/sweeps/hybrid_init.py:cpu --workdir=runs/sweep_hybrid_cpu
"""
from spt_jax.config_lib import sweep_config


# Every hybrid starts from the `all` run's pretraining of the same seed (pretrained once per seed).
FROM_SPT = "phases=finetune finetune.init_from.source={workdir}/all/seed_{seed}/pretrain"


def get_config(arg=None):
  runs = ["all: finetune.init_from.include=all_but_heads",
          f"qk: {FROM_SPT} finetune.init_from.include=qk",
          f"qkvo: {FROM_SPT} finetune.init_from.include=qkvo",
          f"mlp: {FROM_SPT} finetune.init_from.include=mlp",
          "none: phases=finetune finetune.init_from.source="]
  return sweep_config(base="configs/synthetic_spt.py" + (":cpu" if arg == "cpu" else ""),
                      runs=runs, seeds=(0, 1, 2),
                      title="Hybrid initialisation: which SPT subtrees are loaded")
