r"""LRA Path-X (Pathfinder 128x128, contour length 14, length 16,384; block-local attention), with self-pretraining (masked reconstruction on the task's own inputs), then fine-tuning.

  python main.py --config=configs/pathx_spt.py --workdir=runs/pathx_spt
  python main.py --config=configs/pathx_spt.py:smoke --workdir=/tmp/pathx_spt_smoke

Data: generated once into ~/.cache/spt_jax, or the LRA release via --config.data.data_dir (holding pathfinder128/).
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024), their small Path-X model: 4
layers, d_model 128, 4 heads, FF 128, attention in local windows of 4096, max pooling, one linear
classifier, pixels normalised to [-1, 1]; AdamW without weight decay, batch 32, lr 5e-4, 5000 warmup
steps and 200 epochs per phase; SPT masks 50% of pixels and predicts each 8-bit value (256-way
cross-entropy); fine-tuning from the best-validation SPT checkpoint. Beside each value, its source:
"paper App. C" is their appendix C (the source for masking rates and learning rates), a file:line is
in their code, IdoAmos/not-from-scratch@f919137. docs/configs.md#pathx tabulates every setting;
tests/lra_published.py holds the published values, and tests/test_config_table.py fails when this
file drifts from them.
"""
import ml_collections

from spt_jax import config_lib


def get_config(arg=None):
  variants = config_lib.parse_variants(arg, ("smoke",), "configs/pathx_spt.py")
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.phases = "pretrain,finetune"
  config.data = config_lib.data_config(
      "pathfinder", 128,
      difficulty="hard",   # src/dataloaders/lra.py:398
      pixel_mean=127.5,    # src/dataloaders/lra.py:765-766
      pixel_std=127.5)     # src/dataloaders/lra.py:765-766
  # Model defaults that are theirs too: dropout 0 (configs/model/transformer.yaml:6-8), sinusoidal
  # positions added to the input embedding (src/tasks/encoders.py:99-131), GELU
  # (src/models/sequence/ff.py:13-38).
  config.model = config_lib.transformer_config(
      num_layers=4,        # configs/experiment/lra/transformer-lra-pathx-small.yaml:13
      d_model=128,         # configs/experiment/lra/transformer-lra-pathx-small.yaml:15
      num_heads=4,         # configs/experiment/lra/transformer-lra-pathx-small.yaml:23
      d_ff=128,           # configs/experiment/lra/transformer-lra-pathx-small.yaml:32 (1 x d_model)
      # configs/experiment/lra/transformer-lra-pathx-small.yaml:18 (mhfla: local windows, look
      # back/forward 1)
      attention="local",
      attention_block_size=4096,  # configs/experiment/lra/transformer-lra-pathx-small.yaml:20
      pooling="max",       # configs/experiment/lra/transformer-lra-pathx-small.yaml:38 (mode: max)
      # configs/experiment/lra/transformer-lra-pathx-small.yaml:37; src/tasks/decoders.py:93-105
      # (decoder `sequence`: one Linear)
      classifier="linear")
  # Phase defaults that are theirs too: AdamW b1 0.9, b2 0.999 (configs/optimizer/adamw.yaml:2-5),
  # eps 1e-8 (torch.optim.AdamW's default), linear warmup then constant
  # (configs/scheduler/constant_warmup.yaml:3-7), no gradient clipping
  # (configs/trainer/default.yaml:1-5).
  config.pretrain = config_lib.phase_config(
      "mlm",
      # paper App. C; configs/experiment/lra/transformer-lra-pathx-mlm-small.yaml:41
      mask_rate=0.5,
      # configs/experiment/lra/transformer-lra-pathx-mlm-small.yaml:43 ("should not use l1 for
      # pathx")
      pixel_loss="ce",
      learning_rate=5e-4,      # configs/experiment/lra/transformer-lra-pathx-mlm-small.yaml:53
      batch_size=32,           # configs/experiment/lra/transformer-lra-pathx-mlm-small.yaml:49
      num_epochs=200.0,        # configs/experiment/lra/transformer-lra-pathx-mlm-small.yaml:57
      warmup_steps=5000,       # configs/experiment/lra/transformer-lra-pathx-mlm-small.yaml:8
      weight_decay=0.0,        # configs/experiment/lra/transformer-lra-pathx-mlm-small.yaml:54
      weight_decay_on="all")   # train.py:502-507,519 (no parameter groups: every parameter decays)
  config.finetune = config_lib.phase_config(
      "classification",
      learning_rate=5e-4,      # configs/experiment/lra/transformer-lra-pathx-small.yaml:44
      batch_size=32,           # configs/experiment/lra/transformer-lra-pathx-small.yaml:41
      num_epochs=200.0,        # configs/experiment/lra/transformer-lra-pathx-small.yaml:48
      warmup_steps=5000,       # configs/experiment/lra/transformer-lra-pathx-small.yaml:9
      weight_decay=0.0,        # configs/experiment/lra/transformer-lra-pathx-small.yaml:45
      weight_decay_on="all")   # train.py:502-507,519 (no parameter groups: every parameter decays)
  config.finetune.init_from.update(
      source="pretrain",
      # README.md:39-47 (val/best.ckpt: the best-validation SPT checkpoint, as the paper)
      checkpoint="best",
      exclude=("mlm_head/.*",))  # train.py:852-884 (decoder weights are dropped, encoder loaded)
  if "smoke" in variants:
    config_lib.smoke(config)
  return config
