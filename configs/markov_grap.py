r"""Toy event sequences (GraP's `toy-markovian`), composite self-pretraining weighted by GraP, then
fine-tuning: the event-sequence setting of GraP's paper, where the label is readable.

  python main.py --config=configs/markov_grap.py --workdir=runs/markov_grap
  python main.py --config=configs/markov_grap.py:smoke --workdir=/tmp/markov_grap_smoke
  python main.py --config=configs/markov_grap.py --workdir=runs/markov_grap_tok \
    --config.pretrain.grap.probe=token_mlp            # pretpp's per-token MLP probe
  python main.py --config=configs/markov_grap.py --workdir=runs/markov_time \
    "--config.pretrain.composite.losses=('mlm','span','random','time')"   # + the time-field loss

Data, model, optimiser, the 2,500 pretraining steps and the fine-tuning are configs/markov_spt.py's;
the pretraining phase is objective 'composite' (spt_jax/objectives/composite/) with the heads mlm,
span and the useless random-target loss (the redundancy test of docs/grap.md), weighted by GraP with its
defaults (the 'sgd' parametrisation, a pooled linear probe with its own Adam). `get_config(arg,
weighting=...)` gives the same run under another weighting (configs/sweeps/grap_compare.py). The
fine-tune loads the encoder and leaves every `pretrain_heads/` parameter behind.
"""
from spt_jax import config_lib

# The pretraining settings carried over from markov_spt.py into the composite phase.
_CARRIED = ("mask_rate", "learning_rate", "num_steps", "warmup_steps", "eval_every_steps",
            "checkpoint_every_steps")


def get_config(arg=None, weighting="grap"):
  config = config_lib.load_config("configs/markov_spt.py")
  config.pretrain = config_lib.phase_config("composite",
                                           **{k: config.pretrain[k] for k in _CARRIED})
  config.pretrain.composite.update(losses=("mlm", "span", "random"), weighting=weighting)
  config.finetune.init_from.exclude = ("pretrain_heads/.*",)
  config_lib.apply_variant(config, arg, __file__)
  return config
