r"""LRA Retrieval (ACL Anthology Network document pairs, byte level, 4000 per document), with self-pretraining (masked reconstruction on the task's own inputs), then fine-tuning.

  python main.py --config=configs/retrieval_spt.py --workdir=runs/retrieval_spt
  python main.py --config=configs/retrieval_spt.py:smoke --workdir=/tmp/retrieval_spt_smoke

Data: the LRA release: --config.data.data_dir=/path/to/lra_release (holding tsv_data/new_aan_pairs.*.tsv); the smoke variant reads the bundled fixture tests/fixtures/lra_release.
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024), App. C, as tabulated in
spt_jax/config_lib.py (LRA["retrieval"]): model size, batch sizes, epochs, learning rates, masking rate
and pooling; AdamW (0.9, 0.999), linear warmup then constant, pre-LN, sinusoidal positions, dropout 0.
"""
from spt_jax import config_lib


def get_config(arg=None):
  return config_lib.lra_config("retrieval", with_spt=True, arg=arg)
