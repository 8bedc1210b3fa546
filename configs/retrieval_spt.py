r"""LRA Retrieval (ACL Anthology Network document pairs, byte level, 4000 per document), with self-pretraining (masked reconstruction on the task's own inputs), then fine-tuning.

  python main.py --config=configs/retrieval_spt.py --workdir=runs/retrieval_spt
  python main.py --config=configs/retrieval_spt.py:smoke --workdir=/tmp/retrieval_spt_smoke --config.data.data_dir=tests/fixtures/lra_release

Data: the LRA release: --config.data.data_dir=/path/to/lra_release (holding tsv_data/new_aan_pairs.*.tsv); try the smoke variant on the bundled fixture with --config.data.data_dir=tests/fixtures/lra_release.
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024): 4 layers, d_model 128, 4
heads, FF 512, each document mean-pooled, the pair's [u, v, u-v, u*v] into an MLP classifier
(GELU); AdamW without weight decay, batch 32, 32 epochs per phase; SPT masks 15% of tokens, lr 5e-3,
2000 warmup steps; fine-tuning lr 5e-4, 5000 warmup steps, from the best-validation SPT checkpoint.
Beside each value, its source: "paper App. C" is their appendix C (the source for masking rates and
learning rates), a file:line is in their code, IdoAmos/not-from-scratch@f919137.
docs/configs.md#retrieval tabulates every setting; tests/lra_published.py holds the published
values, and tests/test_config_table.py fails when this file drifts from them.
"""
import ml_collections

from spt_jax import config_lib


def get_config(arg=None):
  variants = config_lib.parse_variants(arg, ("smoke",), "configs/retrieval_spt.py")
  config = ml_collections.ConfigDict()
  config.seed = 0
  config.phases = "pretrain,finetune"
  config.data = config_lib.data_config(
      "retrieval", max_length=4000)  # configs/dataset/aan.yaml:5 (per document)
  # Model defaults that are theirs too: dropout 0 (configs/model/transformer.yaml:6-8), sinusoidal
  # positions added to the input embedding (src/tasks/encoders.py:99-131), GELU
  # (src/models/sequence/ff.py:13-38); exact attention, except that theirs ignores the key padding
  # mask (src/models/sequence/mha.py:133-134) and spt-jax masks padded keys, as LRA does.
  config.model = config_lib.transformer_config(
      num_layers=4,        # configs/experiment/lra/transformer-lra-aan.yaml:9
      d_model=128,         # configs/experiment/lra/transformer-lra-aan.yaml:11
      num_heads=4,         # configs/experiment/lra/transformer-lra-aan.yaml:16
      d_ff=512,            # configs/experiment/lra/transformer-lra-aan.yaml:25 (4 x d_model)
      pooling="mean",      # src/tasks/decoders.py:321-325 (each document over its own length)
      # src/tasks/decoders.py:339-344; their order is [u, v, u-v, u*v]: the same features
      pair_features="uvmd",
      # configs/pipeline/aan.yaml:6-13; src/tasks/decoders.py:365-371 (Linear(4d,d), GELU, Linear)
      classifier="mlp",
      classifier_activation="gelu")  # src/tasks/decoders.py:365-371
  # Phase defaults that are theirs too: AdamW b1 0.9, b2 0.999 (configs/optimizer/adamw.yaml:2-5),
  # eps 1e-8 (torch.optim.AdamW's default), linear warmup then constant
  # (configs/scheduler/constant_warmup.yaml:3-7), no gradient clipping
  # (configs/trainer/default.yaml:1-5).
  config.pretrain = config_lib.phase_config(
      "mlm",
      # paper App. C; the yaml has mlm_prob 0.0
      # (configs/experiment/lra/transformer-lra-aan-mlm.yaml:30), set on the command line
      mask_rate=0.15,
      # paper App. C; the yaml has lr 0.05
      # (configs/experiment/lra/transformer-lra-aan-mlm.yaml:39), overridden
      learning_rate=5e-3,
      batch_size=32,           # configs/experiment/lra/transformer-lra-aan-mlm.yaml:36
      num_epochs=32.0,         # configs/experiment/lra/transformer-lra-aan-mlm.yaml:47
      warmup_steps=2000,       # configs/experiment/lra/transformer-lra-aan-mlm.yaml:44
      weight_decay=0.0,        # configs/experiment/lra/transformer-lra-aan-mlm.yaml:40
      weight_decay_on="all")   # train.py:502-507,519 (no parameter groups: every parameter decays)
  config.finetune = config_lib.phase_config(
      "classification",
      # paper App. C; the yaml has lr 0.05 (configs/experiment/lra/transformer-lra-aan.yaml:33),
      # overridden
      learning_rate=5e-4,
      batch_size=32,           # configs/experiment/lra/transformer-lra-aan.yaml:30
      num_epochs=32.0,         # configs/experiment/lra/transformer-lra-aan.yaml:41
      warmup_steps=5000,       # configs/experiment/lra/transformer-lra-aan.yaml:38
      weight_decay=0.0,        # configs/experiment/lra/transformer-lra-aan.yaml:34
      weight_decay_on="all")   # train.py:502-507,519 (no parameter groups: every parameter decays)
  config.finetune.init_from.update(
      source="pretrain",
      # README.md:39-47 (val/best.ckpt: the best-validation SPT checkpoint, as the paper)
      checkpoint="best",
      exclude=("mlm_head/.*",))  # train.py:852-884 (decoder weights are dropped, encoder loaded)
  if "smoke" in variants:
    config_lib.smoke(config)
  return config
