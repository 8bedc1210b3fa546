r"""LRA Retrieval (ACL Anthology Network document pairs, byte level, 4000 per document), from scratch (the fine-tuning phase of retrieval_spt.py from a random initialisation).

  python main.py --config=configs/retrieval_scratch.py --workdir=runs/retrieval_scratch
  python main.py --config=configs/retrieval_scratch.py:smoke --workdir=/tmp/retrieval_scratch_smoke --config.data.data_dir=tests/fixtures/lra_release

Data: the LRA release: --config.data.data_dir=/path/to/lra_release (holding tsv_data/new_aan_pairs.*.tsv); try the smoke variant on the bundled fixture with --config.data.data_dir=tests/fixtures/lra_release.
Hyperparameters: the fine-tuning phase of configs/retrieval_spt.py (Amos et al.'s settings,
each with its source there; docs/configs.md#retrieval), so the two runs differ only in the
initialisation.
"""
from spt_jax import config_lib


def get_config(arg=None):
  config_lib.parse_variants(arg, ("smoke",), "configs/retrieval_scratch.py")
  config = config_lib.load_config("configs/retrieval_spt.py" + (f":{arg}" if arg else ""))
  config.phases = "finetune"
  del config.pretrain
  config.finetune.init_from.source = ""  # a random initialisation
  return config
