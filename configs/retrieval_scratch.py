r"""LRA Retrieval (ACL Anthology Network document pairs, byte level, 4000 per document), from scratch (the fine-tuning phase of retrieval_spt.py from a random initialisation).

  python main.py --config=configs/retrieval_scratch.py --workdir=runs/retrieval_scratch
  python main.py --config=configs/retrieval_scratch.py:smoke --workdir=/tmp/retrieval_scratch_smoke

Data: the LRA release: --config.data.data_dir=/path/to/lra_release (holding tsv_data/new_aan_pairs.*.tsv); the smoke variant reads the bundled fixture tests/fixtures/lra_release.
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024), App. C, as tabulated in
spt_jax/config_lib.py (LRA["retrieval"]): model size, batch sizes, epochs, learning rates, masking rate
and pooling; AdamW (0.9, 0.999), linear warmup then constant, pre-LN, sinusoidal positions, dropout 0.
"""
from spt_jax import config_lib


def get_config(arg=None):
  return config_lib.lra_config("retrieval", with_spt=False, arg=arg)
