r"""LRA Retrieval (ACL Anthology Network document pairs, byte level, 4000 per document), from scratch (the fine-tuning phase of retrieval_spt.py from a random initialisation).

  python main.py --config=configs/retrieval_scratch.py --workdir=runs/retrieval_scratch
  python main.py --config=configs/retrieval_scratch.py:smoke --workdir=/tmp/retrieval_scratch_smoke --config.data.data_dir=tests/fixtures/lra_release

Data: the LRA release: --config.data.data_dir=/path/to/lra_release (holding tsv_data/new_aan_pairs.*.tsv); try the smoke variant on the bundled fixture with --config.data.data_dir=tests/fixtures/lra_release.
Hyperparameters: Amos et al., "Never Train from Scratch" (ICLR 2024), as in
docs/configs.md#retrieval, row by row with the source of each value (spt_jax/lra_table.py: the paper
for masking rates and learning rates, their code at file:line for the rest).
"""
from spt_jax import config_lib


def get_config(arg=None):
  return config_lib.lra_config("retrieval", with_spt=False, arg=arg)
