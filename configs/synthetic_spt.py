r"""Synthetic proximity task with self-pretraining: the mechanism study's 1-layer setting.

  python main.py --config=configs/synthetic_spt.py --workdir=runs/synthetic_spt
  python main.py --config=configs/synthetic_spt.py:smoke --workdir=/tmp/syn_smoke
  python main.py --config=configs/synthetic_spt.py --workdir=runs/syn_2l --config.model.num_layers=2
  python main.py --config=configs/synthetic_spt.py --workdir=W --config.pretrain.data=pretrain_data
  (the last pretrains on another Markov chain, `config.pretrain_data`, then fine-tunes on config.data;
  the `cpu` variant shortens both phases for the sweeps in configs/sweeps/)

Setting: Coser et al. (2026), "Towards Understanding Self-Pretraining for Sequence Classification":
1-layer Transformer, additive sinusoidal position codes, mean pooling, length 100, binary labels. Their
generator is unpublished; ours (spt_jax/data/synthetic.py, docs/synthetic_task.md) labels a sequence by
whether `A` is immediately followed by `B`, over a Markov background with local structure. Widths and
step counts are sized for a CPU (a few minutes on 2 cores); optimiser as Amos et al. (AdamW, warmup
then constant). SPT: 15% masking, 10 epochs; fine-tuning: 20 epochs from the SPT checkpoint.
"""
from spt_jax import config_lib


def get_config(arg=None):
  config = config_lib.ml_collections.ConfigDict()
  config.seed = 0
  config.phases = "pretrain,finetune"
  config.data = config_lib.data_config("synthetic")
  # Other data of the same vocabulary, for cross-data SPT: --config.pretrain.data=pretrain_data.
  config.pretrain_data = config_lib.data_config("synthetic", seed=1, p_successor=0.5)
  config.model = config_lib.transformer_config(num_layers=1, d_model=64, num_heads=4, d_ff=128)
  config.pretrain = config_lib.phase_config(
      "mlm", mask_rate=0.15, learning_rate=1e-3, num_epochs=10.0, warmup_steps=250,
      eval_every_steps=250, checkpoint_every_steps=500)
  config.finetune = config_lib.synthetic_finetune()
  config.finetune.init_from.update(source="pretrain", checkpoint="best", include=(".*",),
                                   exclude=("mlm_head/.*",))
  config_lib.apply_variant(config, arg, __file__)
  return config
