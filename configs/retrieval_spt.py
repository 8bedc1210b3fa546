r"""LRA Retrieval (ACL Anthology Network document pairs, byte level, 4000 per document), with self-pretraining (masked reconstruction on the task's own inputs), then fine-tuning.

  python main.py --config=configs/retrieval_spt.py --workdir=runs/retrieval_spt
  python main.py --config=configs/retrieval_spt.py:smoke --workdir=/tmp/retrieval_spt_smoke --config.data.data_dir=tests/fixtures/lra_release

Data: the LRA release: --config.data.data_dir=/path/to/lra_release (holding tsv_data/new_aan_pairs.*.tsv); try the smoke variant on the bundled fixture with --config.data.data_dir=tests/fixtures/lra_release.
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024), as in
docs/configs.md#retrieval, row by row with the source of each value (spt_jax/lra_table.py: the paper
for masking rates and learning rates, their code at file:line for the rest).
"""
from spt_jax import config_lib


def get_config(arg=None):
  return config_lib.lra_config("retrieval", with_spt=True, arg=arg)
