r"""ListOps with self-pretraining: masked-token SPT on the training inputs, then fine-tuning.

  python main.py --config=configs/listops_spt.py --workdir=runs/listops_spt
  python main.py --config=configs/listops_spt.py:smoke --workdir=/tmp/spt_smoke   # < 1 min, 2 CPUs

Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024), App. C, ListOps Transformer:
6 layers, d_model 512, 8 heads, FF 2048, pre-LN, dropout 0, sinusoidal positions, mean pooling, AdamW
(0.9, 0.999), linear warmup then constant, batch 32, masking rate 10%, SPT lr 1e-3 for 100 epochs,
fine-tuning lr 1e-4 for 100 epochs from the SPT checkpoint with the best validation masked accuracy.
Data: LRA ListOps (96k/2k/2k, length <= 2000), generated with LRA's generator unless
`--config.data.data_dir` points at a directory with `listops-1000/basic_{train,val,test}.tsv`.
"""
from spt_jax import config_lib


def get_config(arg=None):
  config = config_lib.ml_collections.ConfigDict()
  config.seed = 0
  config.phases = "pretrain,finetune"
  config.data = config_lib.listops_data()
  config.model = config_lib.transformer_config()
  config.pretrain = config_lib.phase_config(
      "mlm", mask_rate=0.1, learning_rate=1e-3, num_epochs=100.0, warmup_steps=1000,
      eval_every_steps=3000, checkpoint_every_steps=1000)
  config.finetune = config_lib.listops_finetune()
  # The SPT hand-off: every pretrained parameter except the masked-token head.
  config.finetune.init_from.update(source="pretrain", checkpoint="best", include=(".*",),
                                   exclude=("mlm_head/.*",))
  config_lib.apply_variant(config, arg, __file__)
  return config
