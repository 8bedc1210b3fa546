r"""Does SPT need the downstream data? Pretrain on the task's own inputs, on another Markov chain
(`config.pretrain_data`: p_successor 0.5, other seed, same vocabulary), or not at all.

  python -m spt_jax.sweep --config=configs/sweeps/data_source.py:cpu --workdir=runs/sweep_data_cpu
"""
from spt_jax.config_lib import sweep_config


def get_config(arg=None):
  runs = ["same_data: pretrain.data=", "other_data: pretrain.data=pretrain_data",
          "none: phases=finetune finetune.init_from.source="]
  return sweep_config(base="configs/synthetic_spt.py" + (":cpu" if arg == "cpu" else ""),
                      runs=runs, seeds=(0, 1) if arg == "cpu" else (0, 1, 2),
                      title="SPT data source")
