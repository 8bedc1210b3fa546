r"""Does supervised training need to learn attention? Attention frozen at its random (or SPT) value
during fine-tuning vs trained (Coser et al.: freezing random attention changes little).

  python -m spt_jax.sweep --config=configs/sweeps/freezing.py:cpu --workdir=runs/sweep_freeze_cpu
"""
from spt_jax.sweep import sweep_config


def get_config(arg=None):
  runs = ["scratch: phases=finetune finetune.init_from.source=", "scratch_frozen_attention: phases=finetune finetune.init_from.source= finetune.freeze=attention",
          "scratch_frozen_qk: phases=finetune finetune.init_from.source= finetune.freeze=qk", "spt: pretrain.data=",
          "spt_frozen_attention: finetune.freeze=attention"]
  return sweep_config(base="configs/synthetic_spt.py" + (":cpu" if arg == "cpu" else ""),
                      runs=runs, seeds=(0, 1) if arg == "cpu" else (0, 1, 2),
                      title="Freezing attention during fine-tuning")
