r"""Which SPT weights carry the gain? Fine-tuning from random init except the listed subtrees,
loaded from the SPT checkpoint: W_Q,W_K (qk); W_Q,W_K,W_V,W_O (qkvo); MLPs; everything; nothing.

  python -m spt_jax.sweep --config=configs/sweeps/hybrid_init.py:cpu --workdir=runs/sweep_hybrid_cpu
"""
from spt_jax.sweep import sweep_config


def get_config(arg=None):
  runs = ["none: phases=finetune finetune.init_from.source=", "qk: finetune.init_from.include=qk",
          "qkvo: finetune.init_from.include=qkvo", "mlp: finetune.init_from.include=mlp",
          "all: finetune.init_from.include=all_but_heads"]
  return sweep_config(base="configs/synthetic_spt.py" + (":cpu" if arg == "cpu" else ""),
                      runs=runs, seeds=(0, 1) if arg == "cpu" else (0, 1, 2),
                      title="Hybrid initialisation: which SPT subtrees are loaded")
