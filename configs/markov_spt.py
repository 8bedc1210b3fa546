r"""Toy event sequences (GraP's `toy-markovian`, spt_jax/data/markov_events.py): masked-token SPT,
then fine-tuning; the base of configs/markov_grap.py and configs/markov_scratch.py.

  python main.py --config=configs/markov_spt.py --workdir=runs/markov_spt
  python main.py --config=configs/markov_spt.py:smoke --workdir=/tmp/markov_spt_smoke

Data: 10 presets of 3x3 transition matrices (the authors' seed), 64 events per sequence, label = the
preset (10 classes), 8,000 / 1,000 / 1,000 sequences. Model: the authors' toy Transformer width
(d_model 64, 4 heads, FF 256) at 2 layers instead of their 4, for CPU sweeps; mean pooling,
sinusoidal positions. Optimiser: AdamW lr 1e-3 as their Adam, a 100-step warmup (theirs has none; a
short one keeps the first Adam steps of a fresh model small). SPT: 15% masking, 2,500 steps (10
epochs at batch 32, the GraP study's budget); fine-tuning: 1,500 steps at lr 5e-4 from the best SPT
checkpoint (the synthetic task's fine-tuning learning rate).
"""
from spt_jax import config_lib


def get_config(arg=None):
  config = config_lib.ml_collections.ConfigDict()
  config.seed = 0
  config.phases = "pretrain,finetune"
  config.data = config_lib.data_config("markov_events")
  config.model = config_lib.transformer_config(num_layers=2, d_model=64, num_heads=4, d_ff=256)
  config.pretrain = config_lib.phase_config(
      "mlm", mask_rate=0.15, learning_rate=1e-3, num_steps=2500, warmup_steps=100,
      eval_every_steps=250, checkpoint_every_steps=500)
  config.finetune = config_lib.phase_config(
      "classification", learning_rate=5e-4, num_steps=1500, warmup_steps=100,
      eval_every_steps=250, checkpoint_every_steps=500)
  config.finetune.init_from.update(source="pretrain", checkpoint="best", include=(".*",),
                                   exclude=("mlm_head/.*",))
  config_lib.apply_variant(config, arg, __file__)
  return config
