r"""LRA Pathfinder (32x32, contour length 14, 1024 pixels), with self-pretraining (masked reconstruction on the task's own inputs), then fine-tuning.

  python main.py --config=configs/pathfinder_spt.py --workdir=runs/pathfinder_spt
  python main.py --config=configs/pathfinder_spt.py:smoke --workdir=/tmp/pathfinder_spt_smoke
  python main.py --config=configs/pathfinder_spt.py:cpu --workdir=runs/pathfinder_spt_cpu

Data: generated once into ~/.cache/spt_jax (spt_jax/data/pathfinder.py), or the LRA release via --config.data.data_dir=/path/to/lra_release (holding pathfinder32/).
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024): 4 layers, d_model 128, 8
heads, FF 128, mean pooling, one linear classifier, pixels normalised to [-1, 1]; AdamW without
weight decay, batch 32; SPT masks 50% of pixels and predicts each 8-bit value (256-way
cross-entropy), lr 1e-3, 50 epochs, 2500 warmup steps; fine-tuning lr 5e-4, 200 epochs, 5000 warmup
steps, from the best-validation SPT checkpoint. Beside each value, its source: "paper App. C" is
their appendix C (the source for masking rates and learning rates), a file:line is in their code,
IdoAmos/not-from-scratch@f919137. docs/configs.md#pathfinder tabulates every setting;
tests/lra_published.py holds the published values, and tests/test_config_table.py fails when this
file drifts from them.
Variants: `smoke` (the task's smoke sizes), `cpu` (the LRA-at-CPU-scale study, docs/lra_cpu.md),
combinable ('cpu,smoke').
"""
import ml_collections

from spt_jax import config_lib


def get_config(arg=None):
  variants = config_lib.parse_variants(arg, ("smoke", "cpu"), "configs/pathfinder_spt.py")
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.phases = "pretrain,finetune"
  config.data = config_lib.data_config(
      "pathfinder", 32,
      difficulty="hard",   # src/dataloaders/lra.py:398 (curv_contour_length_14)
      pixel_mean=127.5,    # src/dataloaders/lra.py:765-766 (Normalize(0.5, 0.5))
      pixel_std=127.5,     # src/dataloaders/lra.py:765-766
      # LRA's pathfinder32 release (images per difficulty)
      generator=dict(num_images=200_000))
  # Model defaults that are theirs too: dropout 0 (configs/model/transformer.yaml:6-8), sinusoidal
  # positions added to the input embedding (src/tasks/encoders.py:99-131), GELU
  # (src/models/sequence/ff.py:13-38); exact attention, except that theirs ignores the key padding
  # mask (src/models/sequence/mha.py:133-134) and spt-jax masks padded keys, as LRA does.
  config.model = config_lib.transformer_config(
      num_layers=4,        # configs/experiment/lra/transformer-lra-pathfinder.yaml:13
      d_model=128,         # configs/experiment/lra/transformer-lra-pathfinder.yaml:15
      num_heads=8,         # configs/experiment/lra/transformer-lra-pathfinder.yaml:20
      d_ff=128,            # configs/experiment/lra/transformer-lra-pathfinder.yaml:29 (1 x d_model)
      pooling="mean",      # configs/experiment/lra/transformer-lra-pathfinder.yaml:35 (mode: pool)
      # configs/experiment/lra/transformer-lra-pathfinder.yaml:34 (sequence_nonelinear commented
      # out); src/tasks/decoders.py:93-105 (decoder `sequence`: one Linear)
      classifier="linear")
  # Phase defaults that are theirs too: AdamW b1 0.9, b2 0.999 (configs/optimizer/adamw.yaml:2-5),
  # eps 1e-8 (torch.optim.AdamW's default), linear warmup then constant
  # (configs/scheduler/constant_warmup.yaml:3-7), no gradient clipping
  # (configs/trainer/default.yaml:1-5).
  config.pretrain = config_lib.phase_config(
      "mlm",
      # paper App. C; the yaml has mlm_prob 0.0
      # (configs/experiment/lra/transformer-lra-pathfinder-mlm.yaml:38), set on the command line
      mask_rate=0.5,
      # configs/experiment/lra/transformer-lra-pathfinder-mlm.yaml:40 (256-way on the raw pixel)
      pixel_loss="ce",
      # paper App. C; the yaml has lr 0.0005
      # (configs/experiment/lra/transformer-lra-pathfinder-mlm.yaml:48), overridden
      learning_rate=1e-3,
      batch_size=32,           # configs/experiment/lra/transformer-lra-pathfinder-mlm.yaml:44
      num_epochs=50.0,         # configs/experiment/lra/transformer-lra-pathfinder-mlm.yaml:52
      warmup_steps=2500,       # configs/experiment/lra/transformer-lra-pathfinder-mlm.yaml:9
      weight_decay=0.0,        # configs/experiment/lra/transformer-lra-pathfinder-mlm.yaml:49
      weight_decay_on="all")   # train.py:502-507,519 (no parameter groups: every parameter decays)
  config.finetune = config_lib.phase_config(
      "classification",
      learning_rate=5e-4,      # configs/experiment/lra/transformer-lra-pathfinder.yaml:41
      batch_size=32,           # configs/experiment/lra/transformer-lra-pathfinder.yaml:38
      num_epochs=200.0,        # configs/experiment/lra/transformer-lra-pathfinder.yaml:45
      warmup_steps=5000,       # configs/experiment/lra/transformer-lra-pathfinder.yaml:9
      weight_decay=0.0,        # configs/experiment/lra/transformer-lra-pathfinder.yaml:42
      weight_decay_on="all")   # train.py:502-507,519 (no parameter groups: every parameter decays)
  config.finetune.init_from.update(
      source="pretrain",
      # README.md:39-47 (val/best.ckpt: the best-validation SPT checkpoint, as the paper)
      checkpoint="best",
      exclude=("mlm_head/.*",))  # train.py:852-884 (decoder weights are dropped, encoder loaded)

  if "cpu" in variants:
    # SPT plus fine-tuning sized for about 15 minutes on one core, keeping the full config's head,
    # pooling, loss and optimiser (docs/lra_cpu.md says why each value). LRA's 32x32 images (the
    # faithful generator), contour 6, shrunk to 16x16 (256 pixels): a 32x32 step is too slow for
    # that budget, and contour 14 at 16x16 is a tangle (docs/lra_cpu.md).
    config.data.update(difficulty="easy", downsample=2, max_length=256,
                       generator=dict(num_images=25_000))
    config.model.update(num_layers=2, d_model=64, num_heads=4, d_ff=64)
    for phase in (config.pretrain, config.finetune):
      phase.update(num_steps=1500, warmup_steps=150, eval_every_steps=250,
                   checkpoint_every_steps=250)
    # Cross-task SPT (--config.pretrain.data=pretrain_data): the long contours (14) of the same
    # generator, shrunk alike.
    config.pretrain_data = config_lib.data_config(
        "pathfinder", 32, difficulty="hard", downsample=2, max_length=256,
        generator=dict(num_images=25_000, seed=0))
  if "smoke" in variants:
    config_lib.smoke(config)
  return config
