r"""GraP against the baselines and a random weight search, at equal
fine-tune budget, and GraP's label-leakage ablation. Three stages per task (`count` or `markov`),
all in the task's ONE workdir so that stages share runs (the sweep runner's run_spec.json keeps
that safe); the two tasks need two workdirs, as their runs have the same names (the runner refuses
a run directory started with other overrides):

  W=runs/grap_compare/markov
  python -m spt_jax.sweep --config=configs/sweeps/grap_compare.py:markov,search --workdir=$W
  python -m spt_jax.sweep --config=configs/sweeps/grap_compare.py:markov --workdir=$W
  python -m spt_jax.sweep --config=configs/sweeps/grap_compare.py:markov,labels --workdir=$W
  (the same with `count` and runs/grap_compare/count; the second stage reads the first's
  $W/<task>_search/results.json: give `from=<W>` in the variant, e.g. `:markov,from=/abs/W`, when W
  is not runs/grap_compare/<task>)

search   the random search: 12 settings of fixed weights on the raw losses (mlm, span, contrastive,
         random), each drawn log-uniform in [0.01, 1] (numpy default_rng(18), listed in SEARCH),
         seed 0 only; output $W/<task>_search
(none)   the comparison, seeds 0-2: GraP (defaults), raw_sum and equal_norm (the two uniform
         baselines), the 3 search settings with the best seed-0 fine-tune validation accuracy rerun
         (ties broken by the lower final validation loss; their seed-0 runs are the search's;
         "best fixed" is the best of them on mean validation accuracy), plain masked-token SPT
         (the composite with mlm alone), fine-tuning from scratch, and GraP and raw_sum without
         the contrastive loss (msr = mlm, span, random: is it the contrastive loss that separates
         the composites from plain SPT?); output
         $W/<task>_compare. On count, where fine-tuning saturates, the tables add the fine-tune
         steps to 99% validation accuracy (`steps_to_val`)
ablation which loss costs the composite its fine-tuning accuracy: raw_sum with mlm and one other
         loss (ms, mc, mr: span, contrastive, random), seeds 0-2, next to the comparison's spt,
         raw_sum_msr and raw_sum (all four losses) runs; output $W/<task>_ablation
labels   GraP with the probe's labels from the first 100% ('grap', the comparison's run), 10% and
         1% of the training set, seeds 0-2; output $W/<task>_labels
smoke    with any stage: the smoke sizes, seed 0, one new run (the checks that the stages run)

Every arm pretrains 2,500 steps and fine-tunes 1,500 (count: configs/synthetic_grap.py:count with
the fine-tune cut to 1,500 steps; markov: configs/markov_grap.py), built by
configs/sweeps/grap_arms.py from the loss set (mscr = mlm, span, contrastive, random) and the
search's fixed weights. The compute to compare (one
GraP run with its overhead against the search): the `pretrain.wall_time_sec` column, summed over the
12 search runs plus the reruns, against GraP's per seed. Seeds can be raised with --config.seeds.
"""
import json
import os

import numpy as np

from spt_jax.config_lib import REPO_ROOT, parse_variants, sweep_config

# Runs name their loss set and fixed weights in configs/sweeps/grap_arms.py's variant (its
# docstring says why); the other overrides are scalars.
ARMS = "configs/sweeps/grap_arms.py"
TASKS = {"count": " finetune.num_steps=1500", "markov": ""}  # fine-tune 1,500 steps in both
# 12 weight settings, one weight per loss of LOSSES, log-uniform in [0.01, 1].
SEARCH = tuple(tuple(float(f"{w:.3g}") for w in row)
               for row in 10 ** np.random.default_rng(18).uniform(-2, 0, (12, 4)))
SELECT = "finetune.best_val.accuracy"  # the search picks on validation, never on test
# Ties on validation accuracy (the count task fine-tunes to 100% from most settings) are broken by
# the lower validation loss at the end of fine-tuning, then by name.
TIE_BREAK = "finetune.final_val.loss"
# Fine-tune steps to this validation accuracy: a finer measure where accuracy saturates (count).
STEPS_TO = {"count": 0.99, "markov": 0.0}
METRICS = ("finetune.test_of_best.accuracy", SELECT, TIE_BREAK, "pretrain.wall_time_sec",
           "pretrain.steps_per_sec", "pretrain.grap.probe_val_accuracy", "pretrain.grap.applicable")
LABEL_FRACTIONS = (0.1, 0.01)
STAGES = ("search", "labels", "ablation")
ABLATION = ("ms", "mc", "mr")  # mlm with one other loss (configs/sweeps/grap_arms.py)


def _arms(task: str, smoke: bool) -> dict[str, str]:
  """Run name → 'config=... overrides' of every arm this file can run on `task`."""
  config = lambda losses, *more: (f"config={ARMS}:{','.join((task, losses, *more))}"
                                  f"{',smoke' if smoke else ''}{TASKS[task]}")
  base = config("mscr")
  arms = {"grap": base, "raw_sum": f"{base} pretrain.composite.weighting=raw_sum",
          "equal_norm": f"{base} pretrain.composite.weighting=equal_norm",
          "spt": f"{config('mlm')} pretrain.composite.weighting=raw_sum",
          "scratch": f"{base} phases=finetune finetune.init_from.source=",
          "grap_msr": config("msr")}
  for i, weights in enumerate(SEARCH):
    arms[f"search_{i:02d}"] = config("mscr", f"fixed={'/'.join(map(str, weights))}")
  for losses in (*ABLATION, "msr"):
    arms[f"raw_sum_{losses}"] = f"{config(losses)} pretrain.composite.weighting=raw_sum"
  for fraction in LABEL_FRACTIONS:
    arms[f"labels_{fraction:g}"] = f"{base} pretrain.grap.label_fraction={fraction}"
  return arms


def _top_searches(task: str, workdir: str, count: int) -> list[str]:
  path = os.path.join(workdir, f"{task}_search", "results.json")
  if not os.path.isabs(path) and not os.path.exists(path):
    path = os.path.join(REPO_ROOT, path)
  if not os.path.exists(path):
    raise FileNotFoundError(
        f"configs/sweeps/grap_compare.py:{task} reruns the best of the search, but {path} does not "
        f"exist: run the search first (python -m spt_jax.sweep "
        f"--config=configs/sweeps/grap_compare.py:{task},search --workdir={workdir}), or name its "
        f"workdir with from=<W>.")
  with open(path) as f:
    rows = [r for r in json.load(f) if r.get(f"{SELECT}_mean") is not None]
  # A summary written before TIE_BREAK was a column (the markov search) has no ties to break.
  rows.sort(key=lambda r: (-r[f"{SELECT}_mean"], r.get(f"{TIE_BREAK}_mean", 0.0), r["run"]))
  return [r["run"] for r in rows[:count]]


def get_config(arg=None):
  items = [a for a in (arg or "").split(",") if a]
  options = dict(a.split("=", 1) for a in items if "=" in a)
  if set(options) - {"from"}:
    raise ValueError(f"configs/sweeps/grap_compare.py: unknown option(s) {sorted(options)}; "
                     f"known: from=<workdir of the search>.")
  variants = parse_variants(",".join(a for a in items if "=" not in a),
                            (*TASKS, *STAGES, "smoke"), __file__)
  tasks = variants & set(TASKS)
  if len(tasks) != 1 or len(variants & set(STAGES)) > 1:
    raise ValueError(f"configs/sweeps/grap_compare.py takes one task of {sorted(TASKS)} and at "
                     f"most one of the stages {STAGES}, got {arg!r}.")
  (task,) = tasks
  smoke = "smoke" in variants
  arms = _arms(task, smoke)
  if "search" in variants:
    stage, seeds = "search", (0,)
    names = [n for n in arms if n.startswith("search_")]
  elif "labels" in variants:
    stage, seeds = "labels", (0, 1, 2)
    names = ["grap"] + [f"labels_{f:g}" for f in LABEL_FRACTIONS]
  elif "ablation" in variants:
    stage, seeds = "ablation", (0, 1, 2)
    names = ["spt", *(f"raw_sum_{losses}" for losses in ABLATION), "raw_sum_msr", "raw_sum"]
  else:
    stage, seeds = "compare", (0, 1, 2)
    top = _top_searches(task, options.get("from", f"runs/grap_compare/{task}"), 1 if smoke else 3)
    names = ["grap", "raw_sum", "equal_norm", *top, "spt", "scratch", "grap_msr", "raw_sum_msr"]
  if smoke:  # One new run: the search's first setting, GraP, or the smallest label fraction.
    seeds = (0,)
    names = {"search": names[:1], "labels": names[-1:], "ablation": names[1:2],
             "compare": ["grap"] + names[3:4]}[stage]
  return sweep_config(base=f"{ARMS}:{task},mscr", runs=[f"{n}: {arms[n]}" for n in names],
                      seeds=seeds, metrics=METRICS, steps_to=STEPS_TO[task],
                      output=f"{task}_{stage}",
                      title=f"GraP ({task}, {stage}): fine-tune test accuracy")
