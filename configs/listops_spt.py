r"""LRA ListOps with self-pretraining: masked-token SPT on the training inputs, then fine-tuning.

  python main.py --config=configs/listops_spt.py --workdir=runs/listops_spt
  python main.py --config=configs/listops_spt.py:smoke --workdir=/tmp/spt_smoke   # < 1 min, 2 CPUs

Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024), row by row with sources in
docs/configs.md#listops (spt_jax/lra_table.py): 6 layers, d_model 512, 8 heads, FF 2048, pre-LN,
dropout 0, sinusoidal positions, mean pooling, one linear classifier, AdamW (0.9, 0.999) with no
weight decay, 2000 warmup steps then constant, batch 32; SPT masks 10% of tokens, lr 1e-3, 100 epochs;
fine-tuning lr 1e-4, 100 epochs, from the SPT checkpoint with the best validation masked accuracy.
Data: LRA ListOps (96k/2k/2k, length <= 2000), generated with LRA's generator unless
`--config.data.data_dir` points at a directory with `listops-1000/basic_{train,val,test}.tsv`.
"""
from spt_jax import config_lib


def get_config(arg=None):
  return config_lib.lra_config("listops", with_spt=True, arg=arg)
