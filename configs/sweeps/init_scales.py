r"""The pretraining-inductive-bias theory's knobs on a Transformer (Anguita et al.): readout
re-initialisation scale gamma_ft of the fresh classifier, and the relative scale of the loaded layers.

  python -m spt_jax.sweep --config=configs/sweeps/init_scales.py:cpu --workdir=runs/sweep_scales_cpu
"""
from spt_jax.config_lib import sweep_config


def get_config(arg=None):
  runs = ["default: pretrain.data=", "gamma_0: finetune.init_from.gamma_ft=0.0",
          "gamma_0.1: finetune.init_from.gamma_ft=0.1", "gamma_1: finetune.init_from.gamma_ft=1.0",
          "encoder_x0.5: finetune.init_from.rescale=0.5 finetune.init_from.rescale_paths=encoder",
          "encoder_x2: finetune.init_from.rescale=2.0 finetune.init_from.rescale_paths=encoder",
          "attention_x0.5: finetune.init_from.rescale=0.5 finetune.init_from.rescale_paths=attention"]
  return sweep_config(base="configs/synthetic_spt.py" + (":cpu" if arg == "cpu" else ""),
                      runs=runs, seeds=(0, 1) if arg == "cpu" else (0, 1, 2),
                      title="Init scales at fine-tuning")
