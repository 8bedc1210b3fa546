r"""LRA Image (CIFAR-10, grayscale, 1024 pixels as continuous 2-channel inputs; --config.data.representation=tokens for LRA's 256 tokens), with self-pretraining (masked reconstruction on the task's own inputs), then fine-tuning.

  python main.py --config=configs/image_spt.py --workdir=runs/image_spt
  python main.py --config=configs/image_spt.py:smoke --workdir=/tmp/image_spt_smoke
  python main.py --config=configs/image_spt.py:smoke,from_pathfinder --workdir=/tmp/pf2cifar  # cross-task SPT

Data: TFDS cifar10 prepared in array_record format under --config.data.data_dir; val = last 10% of train.
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024): 3 layers, d_model 64, 4
heads, FF 128, mean pooling, an MLP classifier (ReLU), pixels normalised with grayscale CIFAR-10's
statistics; AdamW without weight decay; SPT masks 50% of pixels and regresses them (L1), lr 1e-3,
batch 32, 50 epochs; fine-tuning lr 1e-3, batch 50, 200 epochs, from the best-validation SPT
checkpoint. Beside each value, its source: "paper App. C" is their appendix C (the source for
masking rates and learning rates), a file:line is in their code, IdoAmos/not-from-scratch@f919137.
docs/configs.md#image tabulates every setting; tests/lra_published.py holds the published values,
and tests/test_config_table.py fails when this file drifts from them.
Variants: `smoke` (the task's smoke sizes), `from_pathfinder` (pretrain on Pathfinder's pixels),
combinable.
"""
import ml_collections

from spt_jax import config_lib


def get_config(arg=None):
  variants = config_lib.parse_variants(arg, ("smoke", "from_pathfinder"), "configs/image_spt.py")
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.phases = "pretrain,finetune"
  config.data = config_lib.data_config(
      "image",
      # src/dataloaders/basic.py:292-311 (Normalize(122.6/255, 61.0/255) after grayscale)
      pixel_mean=122.6,
      pixel_std=61.0)      # src/dataloaders/basic.py:292-311
  # Model defaults that are theirs too: dropout 0 (configs/model/transformer.yaml:6-8), sinusoidal
  # positions added to the input embedding (src/tasks/encoders.py:99-131), GELU
  # (src/models/sequence/ff.py:13-38); exact attention, except that theirs ignores the key padding
  # mask (src/models/sequence/mha.py:133-134) and spt-jax masks padded keys, as LRA does.
  config.model = config_lib.transformer_config(
      num_layers=3,        # configs/experiment/lra/transformer-lra-cifar.yaml:13
      d_model=64,          # configs/experiment/lra/transformer-lra-cifar.yaml:15
      num_heads=4,         # configs/experiment/lra/transformer-lra-cifar.yaml:20
      d_ff=128,            # configs/experiment/lra/transformer-lra-cifar.yaml:29 (2 x d_model)
      # configs/experiment/lra/transformer-lra-cifar.yaml:35 (mode: pool). Max pooling for Image
      # has been reported from the paper, whose table could not be consulted; the code's mean is
      # followed.
      pooling="mean",
      # configs/experiment/lra/transformer-lra-cifar.yaml:34; src/tasks/decoders.py:157-162
      # (`sequence_nonelinear`: Linear(d,d), ReLU, Linear)
      classifier="mlp",
      classifier_activation="relu")  # src/tasks/decoders.py:157-162
  # Phase defaults that are theirs too: AdamW b1 0.9, b2 0.999 (configs/optimizer/adamw.yaml:2-5),
  # eps 1e-8 (torch.optim.AdamW's default), linear warmup then constant
  # (configs/scheduler/constant_warmup.yaml:3-7), no gradient clipping
  # (configs/trainer/default.yaml:1-5).
  config.pretrain = config_lib.phase_config(
      "mlm",
      # paper App. C; configs/experiment/lra/transformer-lra-cifar-mlm.yaml:34
      mask_rate=0.5,
      # configs/experiment/lra/transformer-lra-cifar-mlm.yaml:36 (masked_mae on the normalised
      # value)
      pixel_loss="l1",
      learning_rate=1e-3,      # configs/experiment/lra/transformer-lra-cifar-mlm.yaml:44
      batch_size=32,           # configs/experiment/lra/transformer-lra-cifar-mlm.yaml:40
      num_epochs=50.0,         # configs/experiment/lra/transformer-lra-cifar-mlm.yaml:48
      warmup_steps=2500,       # configs/experiment/lra/transformer-lra-cifar-mlm.yaml:9
      weight_decay=0.0,        # configs/experiment/lra/transformer-lra-cifar-mlm.yaml:45
      weight_decay_on="all")   # train.py:502-507,519 (no parameter groups: every parameter decays)
  config.finetune = config_lib.phase_config(
      "classification",
      learning_rate=1e-3,      # configs/experiment/lra/transformer-lra-cifar.yaml:44
      batch_size=50,           # configs/experiment/lra/transformer-lra-cifar.yaml:41
      num_epochs=200.0,        # configs/experiment/lra/transformer-lra-cifar.yaml:48
      warmup_steps=2000,       # configs/experiment/lra/transformer-lra-cifar.yaml:9
      weight_decay=0.0,        # configs/experiment/lra/transformer-lra-cifar.yaml:45
      weight_decay_on="all")   # train.py:502-507,519 (no parameter groups: every parameter decays)
  config.finetune.init_from.update(
      source="pretrain",
      # README.md:39-47 (val/best.ckpt: the best-validation SPT checkpoint, as the paper)
      checkpoint="best",
      exclude=("mlm_head/.*",))  # train.py:852-884 (decoder weights are dropped, encoder loaded)

  if "from_pathfinder" in variants:
    # Cross-task SPT (Coser et al.): pretrain on Pathfinder pixels, fine-tune on CIFAR-10 pixels.
    config.pretrain_data = config_lib.data_config("pathfinder", 32)
    config.pretrain.data = "pretrain_data"
  if "smoke" in variants:
    config_lib.smoke(config)
  return config
