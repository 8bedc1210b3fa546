r"""Does GraP drive a redundant loss down where its probe can read the label?

  python -m spt_jax.sweep --config=configs/sweeps/grap_redundancy.py --workdir=runs/grap_redundancy
  python -m spt_jax.sweep --config=configs/sweeps/grap_redundancy.py:methods --workdir=runs/grap_redundancy
  python -m spt_jax.sweep --config=configs/sweeps/grap_redundancy.py:smoke --workdir=/tmp/grap_red

Pretraining only (GraP's weights are the result), 2,500 steps, 5 seeds, on both tasks where the
probe reads the label (docs/grap.md): the count task (configs/synthetic_grap.py:count, 10 epochs of
250 steps) and the toy event sequences (configs/markov_grap.py). Losses {mlm, span, random}, then
{mlm, span, contrastive, random}; GraP with its defaults ('sgd', pooled linear probe with its own
Adam at 1e-2).

The criterion is on the `grap` entry each run's pretrain results.json gets: each loss's normalised
weight as the median over the last quarter of the steps, relative to the largest. It holds when
`useless_below_5pct` (random below 5% of the largest) is true in at least 4 of the 5 seeds and every
useful loss keeps at least 30% (`useful_above_30pct`); the table's means of these booleans are the
fraction of seeds. A run whose probe is below chance + 15 points says "GraP not applicable (probe
reads nothing)" (`applicable` false) and has no verdict. `smoke`: the first run only, one seed, at
the smoke sizes (the check that the sweep runs).

`methods`: what else GraP itself offers, on the arm where the criterion failed for want of signal
(count, {mlm, span, random}); the task is not touched. One option changed per arm, 5 seeds, output
`<workdir>/methods`: the reference's per-token MLP probe (pretpp's `token_mlp`), the 'scaled-sgd'
parametrisation (the start point `equal_norm`), and a start delay of 250 steps (the probe learns
for 10% of the run before the logits move). `python -m spt_jax.analysis.grap_runs` reads both.
"""
from spt_jax.config_lib import parse_variants, sweep_config

# Runs name their loss set in configs/sweeps/grap_arms.py's variant (its docstring says why).
ARMS = "configs/sweeps/grap_arms.py"
LOSS_SETS = ("msr", "mscr")  # {mlm, span, random}, then with contrastive
TASKS = ("count", "markov")
METRICS = ("pretrain.grap.relative_weight.random", "pretrain.grap.useless_below_5pct",
           "pretrain.grap.useful_above_30pct", "pretrain.grap.applicable",
           "pretrain.grap.probe_val_accuracy", "pretrain.grap.relative_weight.mlm",
           "pretrain.grap.relative_weight.span", "pretrain.grap.relative_weight.contrastive",
           "pretrain.wall_time_sec")


# The `methods` stage's arms: GraP's options, each against the defaults of count_msr.
METHODS = {"count_msr_token_mlp": "pretrain.grap.probe=token_mlp",
           "count_msr_scaled_sgd": "pretrain.grap.parametrisation=scaled-sgd",
           "count_msr_delay250": "pretrain.grap.delay_steps=250"}


def get_config(arg=None):
  variants = parse_variants(arg, ("smoke", "methods"), __file__)
  smoke = "smoke" in variants
  if "methods" in variants:
    runs = [f"{name}: config={ARMS}:count,msr{',smoke' if smoke else ''} phases=pretrain {option}"
            for name, option in METHODS.items()]
    return sweep_config(base=f"{ARMS}:count,msr", runs=runs[:1] if smoke else runs,
                        seeds=(0,) if smoke else (0, 1, 2, 3, 4), metrics=METRICS, steps_to=0.0,
                        output="methods",
                        title="GraP redundancy test, count {mlm, span, random}: GraP's options")
  runs = [f"{task}_{losses}: config={ARMS}:{task},{losses}{',smoke' if smoke else ''} "
          f"phases=pretrain" for task in TASKS for losses in LOSS_SETS]
  return sweep_config(base=f"{ARMS}:count,msr", runs=runs[:1] if smoke else runs,
                      seeds=(0,) if smoke else (0, 1, 2, 3, 4), metrics=METRICS, steps_to=0.0,
                      title="GraP redundancy test: random's weight relative to the largest "
                            "(median, last quarter of pretraining)")
