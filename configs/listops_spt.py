r"""LRA ListOps with self-pretraining: masked-token SPT on the training inputs, then fine-tuning.

  python main.py --config=configs/listops_spt.py --workdir=runs/listops_spt
  python main.py --config=configs/listops_spt.py:smoke --workdir=/tmp/spt_smoke   # < 1 min, 2 CPUs
  python main.py --config=configs/listops_spt.py:cpu --workdir=runs/listops_spt_cpu

Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024): 6 layers, d_model 512, 8
heads, FF 2048, pre-LN, dropout 0, sinusoidal positions, mean pooling, one linear classifier, AdamW
(0.9, 0.999) with no weight decay, 2000 warmup steps then constant, batch 32; SPT masks 10% of
tokens, lr 1e-3, 100 epochs; fine-tuning lr 1e-4, 100 epochs, from the SPT checkpoint with the best
validation masked accuracy. Beside each value, its source: "paper App. C" is their appendix C (the
source for masking rates and learning rates), a file:line is in their code,
IdoAmos/not-from-scratch@f919137. docs/configs.md#listops tabulates every setting;
tests/lra_published.py holds the published values, and tests/test_config_table.py fails when this
file drifts from them.
Data: LRA ListOps (96k/2k/2k, length <= 2000), generated with LRA's generator unless
`--config.data.data_dir` points at a directory with `listops-1000/basic_{train,val,test}.tsv`.
Variants: `smoke` (the task's smoke sizes), `cpu` (the LRA-at-CPU-scale study, docs/lra_cpu.md),
combinable ('cpu,smoke').
"""
import ml_collections

from spt_jax import config_lib


def get_config(arg=None):
  variants = config_lib.parse_variants(arg, ("smoke", "cpu"), "configs/listops_spt.py")
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.phases = "pretrain,finetune"
  # LRA's ListOps generator and release (lra_benchmarks/data/listops.py).
  config.data = config_lib.data_config("listops", num_train=96_000, num_val=2_000, num_test=2_000,
                                       min_length=500, max_length=2000, max_depth=10, max_args=10)
  # LRA (tokens after dropping parentheses); Amos et al.'s l_max is 2048 with <eos>
  # (configs/dataset/listops.yaml:2).
  config.data.max_length = 2000
  # Model defaults that are theirs too: dropout 0 (configs/model/transformer.yaml:6-8), sinusoidal
  # positions added to the input embedding (src/tasks/encoders.py:99-131), GELU
  # (src/models/sequence/ff.py:13-38); exact attention, except that theirs ignores the key padding
  # mask (src/models/sequence/mha.py:133-134) and spt-jax masks padded keys, as LRA does.
  config.model = config_lib.transformer_config(
      num_layers=6,        # configs/experiment/lra/transformer-lra-listops.yaml:9
      d_model=512,         # configs/experiment/lra/transformer-lra-listops.yaml:11
      num_heads=8,         # configs/experiment/lra/transformer-lra-listops.yaml:16
      d_ff=2048,           # configs/experiment/lra/transformer-lra-listops.yaml:25 (4 x d_model)
      # configs/experiment/lra/transformer-lra-listops.yaml:48 (mode: pool, use_lengths)
      pooling="mean",
      # configs/experiment/lra/transformer-lra-listops.yaml:47; src/tasks/decoders.py:93-105
      # (decoder `sequence`: one Linear)
      classifier="linear")
  # Phase defaults that are theirs too: AdamW b1 0.9, b2 0.999 (configs/optimizer/adamw.yaml:2-5),
  # eps 1e-8 (torch.optim.AdamW's default), linear warmup then constant
  # (configs/scheduler/constant_warmup.yaml:3-7), no gradient clipping
  # (configs/trainer/default.yaml:1-5).
  config.pretrain = config_lib.phase_config(
      "mlm",
      # paper App. C; configs/dataset/listops-lm.yaml:12 has mlm_prob 0.0, set on the command line
      mask_rate=0.1,
      # paper App. C; the yaml has lr 0.05
      # (configs/experiment/lra/transformer-lra-listops-mlm.yaml:33), overridden
      learning_rate=1e-3,
      batch_size=32,           # configs/experiment/lra/transformer-lra-listops-mlm.yaml:30
      num_epochs=100.0,        # configs/experiment/lra/transformer-lra-listops-mlm.yaml:41
      warmup_steps=2000,       # configs/experiment/lra/transformer-lra-listops-mlm.yaml:37
      weight_decay=0.0,        # configs/experiment/lra/transformer-lra-listops-mlm.yaml:34
      weight_decay_on="all",   # train.py:502-507,519 (no parameter groups: every parameter decays)
      eval_every_steps=3000,   # spt-jax: one validation per epoch of 96,000 examples
      checkpoint_every_steps=1000)
  config.finetune = config_lib.phase_config(
      "classification",
      # paper App. C; the yaml has lr 0.05
      # (configs/experiment/lra/transformer-lra-listops.yaml:33), overridden
      learning_rate=1e-4,
      batch_size=32,           # configs/experiment/lra/transformer-lra-listops.yaml:30
      num_epochs=100.0,        # configs/experiment/lra/transformer-lra-listops.yaml:41
      warmup_steps=2000,       # configs/experiment/lra/transformer-lra-listops.yaml:37
      weight_decay=0.0,        # configs/experiment/lra/transformer-lra-listops.yaml:34
      weight_decay_on="all",   # train.py:502-507,519 (no parameter groups: every parameter decays)
      eval_every_steps=3000,   # spt-jax: one validation per epoch of 96,000 examples
      checkpoint_every_steps=1000)
  config.finetune.init_from.update(
      source="pretrain",
      # README.md:39-47 (val/best.ckpt: the best-validation SPT checkpoint, as the paper)
      checkpoint="best",
      exclude=("mlm_head/.*",))  # train.py:852-884 (decoder weights are dropped, encoder loaded)

  if "cpu" in variants:
    # SPT plus fine-tuning sized for about 15 minutes on one core, keeping the full config's head,
    # pooling, loss and optimiser (docs/lra_cpu.md says why each value). LRA's generator (depth 10,
    # up to 10 arguments), keeping lengths 64-256 instead of 500-2000.
    config.data.max_length = 256
    config.data.generator.update(num_train=20_000, num_val=2_000, num_test=2_000, min_length=64,
                                 max_length=256)
    config.model.update(num_layers=2, d_model=64, num_heads=4, d_ff=256)
    for phase in (config.pretrain, config.finetune):
      phase.update(num_steps=1500, warmup_steps=150, eval_every_steps=250,
                   checkpoint_every_steps=250)
    # Cross-task SPT (--config.pretrain.data=pretrain_data): shorter, shallower ListOps, the same
    # vocabulary from another distribution.
    config.pretrain_data = config_lib.data_config(
        "listops", num_train=20_000, num_val=2_000, num_test=2_000, min_length=16, max_length=64,
        max_depth=4, max_args=4)
    config.pretrain_data.max_length = 256
  if "smoke" in variants:
    config_lib.smoke(config)
  return config
