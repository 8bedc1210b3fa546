r"""Does supervised training need to learn attention? Attention frozen at its random (or SPT) value
during fine-tuning vs trained (Coser et al.: freezing random attention changes little).

  python -m spt_jax.sweep --config=configs/sweeps/freezing.py:cpu --workdir=runs/sweep_freeze_cpu
"""
from spt_jax.config_lib import sweep_config


SCRATCH = "phases=finetune finetune.init_from.source="
# Fine-tune-only runs start from the `spt` run's pretraining of the same seed (no re-pretraining).
FROM_SPT = "phases=finetune finetune.init_from.source={workdir}/spt/seed_{seed}/pretrain"


def get_config(arg=None):
  runs = ["spt:", f"spt_frozen_attention: {FROM_SPT} finetune.freeze=attention",
          f"scratch: {SCRATCH}", f"scratch_frozen_attention: {SCRATCH} finetune.freeze=attention"]
  if arg != "cpu":
    runs.append(f"scratch_frozen_qk: {SCRATCH} finetune.freeze=qk")
  return sweep_config(base="configs/synthetic_spt.py" + (":cpu" if arg == "cpu" else ""),
                      runs=runs, seeds=(0, 1, 2),
                      title="Freezing attention during fine-tuning")
