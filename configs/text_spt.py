r"""LRA Text (IMDB reviews, byte level, length 4096), with self-pretraining (masked reconstruction on the task's own inputs), then fine-tuning.

  python main.py --config=configs/text_spt.py --workdir=runs/text_spt
  python main.py --config=configs/text_spt.py:smoke --workdir=/tmp/text_spt_smoke

Data: TFDS imdb_reviews prepared in array_record format under --config.data.data_dir (default ~/tensorflow_datasets).
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024): 6 layers, d_model 512, 8
heads, FF 2048, mean pooling, an MLP classifier (ReLU); AdamW with weight decay 0.1 on every
parameter, batch 32; SPT masks 15% of tokens, lr 5e-4, 32 epochs, 5000 warmup steps; fine-tuning lr
1e-4, 65 epochs, 2000 warmup steps, from the best-validation SPT checkpoint. Beside each value, its
source: "paper App. C" is their appendix C (the source for masking rates and learning rates), a
file:line is in their code, IdoAmos/not-from-scratch@f919137. docs/configs.md#text tabulates every
setting; tests/lra_published.py holds the published values, and tests/test_config_table.py fails
when this file drifts from them.
"""
import ml_collections

from spt_jax import config_lib


def get_config(arg=None):
  variants = config_lib.parse_variants(arg, ("smoke",), "configs/text_spt.py")
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.phases = "pretrain,finetune"
  config.data = config_lib.data_config(
      "text", max_length=4096)  # configs/experiment/lra/transformer-lra-imdb.yaml:30
  # Model defaults that are theirs too: dropout 0 (configs/model/transformer.yaml:6-8), sinusoidal
  # positions added to the input embedding (src/tasks/encoders.py:99-131), GELU
  # (src/models/sequence/ff.py:13-38); exact attention, except that theirs ignores the key padding
  # mask (src/models/sequence/mha.py:133-134) and spt-jax masks padded keys, as LRA does.
  config.model = config_lib.transformer_config(
      num_layers=6,        # configs/experiment/lra/transformer-lra-imdb.yaml:9
      d_model=512,         # configs/experiment/lra/transformer-lra-imdb.yaml:11
      num_heads=8,         # configs/experiment/lra/transformer-lra-imdb.yaml:16
      d_ff=2048,           # configs/experiment/lra/transformer-lra-imdb.yaml:25 (4 x d_model)
      # configs/experiment/lra/transformer-lra-imdb.yaml:53 (mode: pool, use_lengths)
      pooling="mean",
      # configs/experiment/lra/transformer-lra-imdb.yaml:52; src/tasks/decoders.py:157-162
      # (`sequence_nonelinear`: Linear(d,d), ReLU, Linear)
      classifier="mlp",
      classifier_activation="relu")  # src/tasks/decoders.py:157-162
  # Phase defaults that are theirs too: AdamW b1 0.9, b2 0.999 (configs/optimizer/adamw.yaml:2-5),
  # eps 1e-8 (torch.optim.AdamW's default), linear warmup then constant
  # (configs/scheduler/constant_warmup.yaml:3-7), no gradient clipping
  # (configs/trainer/default.yaml:1-5).
  config.pretrain = config_lib.phase_config(
      "mlm",
      # paper App. C; the yaml has mlm_prob 0.0
      # (configs/experiment/lra/transformer-lra-imdb-mlm.yaml:35), set on the command line
      mask_rate=0.15,
      # paper App. C; the yaml has lr 0.05
      # (configs/experiment/lra/transformer-lra-imdb-mlm.yaml:46), overridden
      learning_rate=5e-4,
      batch_size=32,           # configs/experiment/lra/transformer-lra-imdb-mlm.yaml:43
      num_epochs=32.0,         # configs/experiment/lra/transformer-lra-imdb-mlm.yaml:54
      warmup_steps=5000,       # configs/experiment/lra/transformer-lra-imdb-mlm.yaml:51
      weight_decay=0.1,        # configs/experiment/lra/transformer-lra-imdb-mlm.yaml:47
      weight_decay_on="all")   # train.py:502-507,519 (no parameter groups: every parameter decays)
  config.finetune = config_lib.phase_config(
      "classification",
      # paper App. C; the yaml has lr 0.05 (configs/experiment/lra/transformer-lra-imdb.yaml:38),
      # overridden
      learning_rate=1e-4,
      batch_size=32,           # configs/experiment/lra/transformer-lra-imdb.yaml:35
      num_epochs=65.0,         # configs/experiment/lra/transformer-lra-imdb.yaml:46
      warmup_steps=2000,       # configs/experiment/lra/transformer-lra-imdb.yaml:43
      weight_decay=0.1,        # configs/experiment/lra/transformer-lra-imdb.yaml:39
      weight_decay_on="all")   # train.py:502-507,519 (no parameter groups: every parameter decays)
  config.finetune.init_from.update(
      source="pretrain",
      # README.md:39-47 (val/best.ckpt: the best-validation SPT checkpoint, as the paper)
      checkpoint="best",
      exclude=("mlm_head/.*",))  # train.py:852-884 (decoder weights are dropped, encoder loaded)
  if "smoke" in variants:
    config_lib.smoke(config)
  return config
