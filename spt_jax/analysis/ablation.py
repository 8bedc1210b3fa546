r"""A checkpoint's metrics with groups of its parameters zeroed: what the trained model uses.

  python -m spt_jax.analysis.ablation --run=runs/x/finetune                  # --zero=qk, test split
  python -m spt_jax.analysis.ablation --run=runs/x/finetune --zero=qk --zero='encoder/layer_1/.*'

Each `--zero` entry (a preset of spt_jax/param_groups.py or a full-match regex over '/'-joined
paths; one matching nothing is an error) is one ablation: the checkpoint is evaluated as it is and
once per entry with the matched leaves set to 0, on a whole split, with the phase's own objective,
evaluation batches and masks (`train.evaluate_split`, the trainer's numbers for the unablated row).

`qk`, the default, zeroes W_Q, its bias and W_K: every query-key score is 0, so attention keeps only
the position rule on the scores (ALiBi's bias; none for additive codes, RoPE or no positions) and is
uniform over each sequence's real tokens where there is none. A model whose metrics do not move
under it classifies without query-key attention: its attention output is the mean of the values,
the same at every position, and what it learnt lies in the values, the MLPs and what absolute
position codes give each token. Writes `<out>/ablation.json` when `--out` is given.
"""
from __future__ import annotations

import json
import os

import jax
import numpy as np
from absl import app, flags
from jax.sharding import NamedSharding, PartitionSpec as P

from spt_jax import checkpoints, param_groups, train, tree
from spt_jax.analysis import read_phase_config
from spt_jax.data import tasks

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line's flags; defined only when run as a program, so that importing this module
  next to spt_jax.analysis.__main__ (which also has --run) does not clash."""
  flags.DEFINE_string("run", None, "A phase directory of a run, e.g. runs/x/finetune.")
  flags.DEFINE_string("checkpoint", "best", "best, latest, init or a step number.")
  flags.DEFINE_multi_string("zero", ["qk"], "A preset or regex of parameters to zero; one "
                            "ablation per entry.")
  flags.DEFINE_string("split", "test", "The split evaluated.")
  flags.DEFINE_string("out", None, "Directory for ablation.json (optional).")
  flags.mark_flags_as_required(["run"])


def zeroed(params, paths) -> dict:
  """`params` with the leaves at `paths` set to 0 (a new tree)."""
  chosen = set(paths)
  return tree.map_with_path(lambda p, x: np.zeros_like(x) if p in chosen else x, params)


def ablate(run: str, zero=("qk",), checkpoint: str = "best", split: str = "test") -> dict:
  """{"metrics": the checkpoint's metrics on `split`, "ablations": {entry: {"paths": zeroed,
  "metrics": ...}}} for each entry of `zero`; every pattern is checked before anything runs."""
  config, phase = read_phase_config(run)
  params_dir = checkpoints.resolve_params_dir(run, checkpoint)
  params = checkpoints.restore_item(params_dir)
  param_groups_of(params, zero)
  task = tasks.load(config[config[phase].get("data") or "data"])
  return {"run": os.path.abspath(run), "checkpoint": params_dir, "split": split,
          **ablate_loaded(config, phase, task, params, zero, split)}


def param_groups_of(params, zero) -> dict[str, list[str]]:
  """Each `zero` entry's matched paths; an entry matching nothing raises, naming it."""
  return {entry: param_groups.resolve([entry], params, what=f"--zero={entry!r}") for entry in zero}


def ablate_loaded(config, phase: str, task, params, zero=("qk",), split: str = "test") -> dict:
  """`ablate` for a phase whose config, task and parameters the caller has already loaded."""
  edits = param_groups_of(params, zero)
  if split not in task.splits:
    raise ValueError(f"split {split!r} is not one of the task's {sorted(task.splits)}.")
  objective = train.make_objective(config, phase, task)
  # One device: an analysis runs beside training, and its numbers do not depend on the devices.
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",),
                           axis_types=(jax.sharding.AxisType.Auto,))
  eval_step = train.make_eval_step(objective, mesh)
  rng = train.evaluation_rng(config.seed, phase)

  def evaluate(p):
    return train.evaluate_split(eval_step, objective, p, task.splits[split], config[phase], rng,
                                NamedSharding(mesh, P("data")))

  return {"metrics": evaluate(params),
          "ablations": {entry: {"paths": paths, "metrics": evaluate(zeroed(params, paths))}
                        for entry, paths in edits.items()}}


def main(argv):
  del argv
  result = ablate(FLAGS.run, FLAGS.zero, FLAGS.checkpoint, FLAGS.split)
  show = lambda m: ", ".join(f"{k} {v:.4f}" for k, v in m.items())
  print(f"{FLAGS.split} as trained: {show(result['metrics'])}")
  for entry, ablation in result["ablations"].items():
    print(f"{FLAGS.split} with {entry} zeroed ({len(ablation['paths'])} arrays): "
          f"{show(ablation['metrics'])}")
  if FLAGS.out:
    os.makedirs(FLAGS.out, exist_ok=True)
    with open(os.path.join(FLAGS.out, "ablation.json"), "w") as f:
      json.dump(result, f, indent=2)
    print(f"wrote {os.path.join(FLAGS.out, 'ablation.json')}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
