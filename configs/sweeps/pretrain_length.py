r"""How much SPT is needed? Fine-tune accuracy vs SPT epochs on the synthetic task (Coser et al. §4).

  python -m spt_jax.sweep --config=configs/sweeps/pretrain_length.py:cpu --workdir=runs/sweep_pt_cpu
  python -m spt_jax.sweep --config=configs/sweeps/pretrain_length.py --workdir=runs/sweep_pt

Default grid: 0, 1, 10, 50, 100, 200 SPT epochs (0 = from scratch), 3 seeds. `cpu`: 0, 1, 2, 5
epochs, 2 seeds, with the synthetic config's `cpu` variant (1500 fine-tune steps; the swept
number of SPT epochs replaces the variant's own 5).
"""
from spt_jax.config_lib import sweep_config


def get_config(arg=None):
  epochs = (0, 1, 2, 5) if arg == "cpu" else (0, 1, 10, 50, 100, 200)
  runs = [f"epochs_{e}: phases=finetune finetune.init_from.source=" if e == 0 else f"epochs_{e}: pretrain.num_epochs={float(e)}"
          for e in epochs]
  return sweep_config(base="configs/synthetic_spt.py" + (":cpu" if arg == "cpu" else ""),
                      runs=runs, seeds=(0, 1) if arg == "cpu" else (0, 1, 2), x_values=epochs,
                      x_label="SPT epochs", title="Fine-tune test accuracy vs SPT length")
