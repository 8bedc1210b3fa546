r"""Reference levels for masked pretraining: where a run's validation masked loss and accuracy stand
between "nothing learnt" and "everything learnable".

  python -m spt_jax.analysis.reference_levels --run=<workdir>/pretrain

On the phase's own validation data and masking (the masks its evaluation draws, batch by batch, with
its own keys), the masked-position cross-entropy (nats) and accuracy of count-based predictors fitted
on its training split:
  frequencies      the training targets' frequencies (no context)
  neighbours ±1    p(target | what the model sees at i−1 and i+1)
  neighbours ±2    p(target | what it sees at i−2, i−1, i+1, i+2)
  grid neighbours  for images read row by row, w pixels a row: p(target | what it sees above, left,
                   right and below: i−w, i−1, i+1, i+w)
and, where the task's generator knows it (`Task.masked_ceiling`, e.g. ListOps: a model that knows
which kind of token each masked position holds and nothing else, the values being uniform draws),
the grammar's ceiling. "What the model sees" is the corrupted input: a neighbour that is masked too
is a mask, as it is for the model. Each context predictor is smoothed towards the next smaller one
by Witten-Bell interpolation, p = (n(c, t) + T(c)·p_smaller(t)) / (n(c) + T(c)) with T(c) the
number of distinct targets seen in context c (frequencies towards uniform; an unseen context is
p_smaller), then mixed with the smaller one's prediction, w·p + (1 − w)·p_smaller, the weight w
from {0, 0.1, ..., 1} chosen on the last tenth of the training sequences (held out from the
counts): a larger context never predicts worse than a smaller one on held-out data, however sparse
its contexts. Every training position counts as a target
(its neighbours masked at the phase's rate with a fixed key): the neighbours' masks are drawn
independently of the target's, so this estimates the same conditional as masked positions alone,
from ten times the data.

Out: `<run>/reference_levels.json` (and printed), which the phase's report.md shows next to the
run's own validation masked loss and accuracy.
"""
from __future__ import annotations

import json
import os

import jax
import numpy as np

LEVELS_FILE = "reference_levels.json"
# (level name, neighbour offsets it conditions on); each backs off to the one before it.
CONTEXTS = (("frequencies", ()), ("neighbours ±1", (-1, 1)), ("neighbours ±2", (-2, -1, 1, 2)))
_CHUNK = 16_384  # eval positions scored at once ([chunk, vocabulary] probabilities)
HELD_OUT = 20_000  # held-out training positions that weigh each level against the one before
WEIGHTS = tuple(np.linspace(0.0, 1.0, 11))  # the weights tried


def _views(objective, arrays, batch_size: int, rng, max_batches: int = 0):
  """(mask [N, L], what the model sees [N, L]) over a split's first N examples, batch by batch as
  the phase's evaluation draws them (`fold_in(rng, i)` for batch i)."""
  from spt_jax.data import pipeline
  corrupt = jax.jit(objective.corrupted)
  masks, views = [], []
  for i, batch in enumerate(pipeline.eval_batches(arrays, batch_size)):
    if max_batches and i >= max_batches:
      break
    mask, view = jax.device_get(corrupt(batch, jax.random.fold_in(rng, i)))
    masks.append(mask)
    views.append(view)
  n = min(len(arrays["inputs"]), sum(len(m) for m in masks))
  return np.concatenate(masks)[:n], np.concatenate(views)[:n].astype(np.int64)


def _context_keys(view, rows, cols, offsets, base: int) -> np.ndarray:
  """One integer per position: what the model sees at `offsets` around it (`base - 1` past the
  sequence's ends)."""
  key = np.zeros(len(rows), np.int64)
  length = view.shape[1]
  for off in offsets:
    j = cols + off
    inside = (j >= 0) & (j < length)
    seen = np.where(inside, view[rows, np.clip(j, 0, length - 1)], base - 1)
    key = key * base + seen
  return key


class _Counts:
  """n(context, target) of one context size, for the contexts `needed` (the validation's) only: a
  dense row per needed context, however many contexts the training split has."""

  def __init__(self, keys, targets, vocab: int, needed):
    self.keys = np.unique(needed)
    self.table = np.zeros((len(self.keys), vocab), np.float32)
    index = np.clip(np.searchsorted(self.keys, keys), 0, len(self.keys) - 1)
    kept = self.keys[index] == keys
    np.add.at(self.table, (index[kept], targets[kept]), 1.0)

  def rows(self, keys) -> np.ndarray:
    """n(context, ·) for each of `keys` (all among `needed`)."""
    return self.table[np.searchsorted(self.keys, keys)].astype(np.float64)


def levels(objective, splits, *, eval_batch_size: int, eval_rng, vocab: int,
           max_eval_batches: int = 0, ceiling=None, fit_rng=None, grid_width: int = 0) -> dict:
  """{level: {'loss': nats, 'accuracy': fraction}} on the validation split's masked positions
  (module docstring). `vocab`: the number of target values; `ceiling(targets)` → per-position
  (nats, accuracy) of the grammar's ceiling, or None; `grid_width` > 0 (images read row by row)
  adds the level of the four grid neighbours (above, left, right, below)."""
  contexts = CONTEXTS + ((("grid neighbours", (-grid_width, -1, 1, grid_width)),)
                         if grid_width else ())
  fit_rng = jax.random.PRNGKey(0) if fit_rng is None else fit_rng
  train, val = splits["train"], splits["val"]
  # What the model sees around every real training position, with the phase's own masking.
  _, fit_view = _views(objective, train, eval_batch_size, fit_rng)
  inputs = np.asarray(train["inputs"]).astype(np.int64)[:len(fit_view)]
  fit_rows, fit_cols = np.nonzero(_real_positions(objective, inputs))
  # The last tenth of the training sequences is held out to weigh each level against the one
  # before it (deleted interpolation): a level then never does worse than its smaller context
  # on held-out data, however sparse its contexts are.
  held = fit_rows >= int(0.9 * len(inputs))
  held_index = np.flatnonzero(held)[::max(1, held.sum() // HELD_OUT)]
  count_rows, count_cols = fit_rows[~held], fit_cols[~held]
  mask, view = _views(objective, val, eval_batch_size, eval_rng, max_eval_batches)
  rows, cols = np.nonzero(mask)
  targets = np.asarray(val["inputs"]).astype(np.int64)[rows, cols]
  held_rows, held_cols = fit_rows[held_index], fit_cols[held_index]
  held_targets = inputs[held_rows, held_cols]
  base = int(max(view.max(), fit_view.max(), vocab)) + 2

  def keys(v, r, c, offs):
    return _context_keys(v, r, c, offs, base)

  counts = [_Counts(keys(fit_view, count_rows, count_cols, offs), inputs[count_rows, count_cols],
                    vocab, np.concatenate([keys(view, rows, cols, offs),
                                           keys(fit_view, held_rows, held_cols, offs)]))
            for _, offs in contexts]

  def level(count, p_smaller, context_keys, weight):
    """Witten-Bell smoothing towards the smaller context's p, then weighed against it."""
    n = count.rows(context_keys)
    types = (n > 0).sum(1, keepdims=True)
    total = n.sum(1, keepdims=True)
    smoothed = np.where(total > 0, (n + types * p_smaller) / np.maximum(total + types, 1),
                        p_smaller)
    return weight * smoothed + (1 - weight) * p_smaller

  weights, p_held = [], np.full((len(held_targets), vocab), 1.0 / vocab)
  at_target = (np.arange(len(held_targets)), held_targets)
  for (_, offs), count in zip(contexts, counts):
    smoothed = level(count, p_held, keys(fit_view, held_rows, held_cols, offs), 1.0)
    # Each weight's held-out loss needs only the targets' probabilities.
    held_loss = [-np.log(w * smoothed[at_target] + (1 - w) * p_held[at_target]).mean()
                 for w in WEIGHTS]
    weight = WEIGHTS[int(np.argmin(held_loss))]
    weights.append(weight)
    p_held = weight * smoothed + (1 - weight) * p_held
  out = {}
  losses = {name: 0.0 for name, _ in contexts}
  correct = {name: 0.0 for name, _ in contexts}
  for start in range(0, len(targets), _CHUNK):
    sl = slice(start, start + _CHUNK)
    t = targets[sl]
    p = np.full((len(t), vocab), 1.0 / vocab)
    for (name, offs), count, weight in zip(contexts, counts, weights):
      p = level(count, p, keys(view, rows[sl], cols[sl], offs), weight)
      losses[name] += float(-np.log(p[np.arange(len(t)), t]).sum())
      correct[name] += float((p.argmax(1) == t).sum())
  for (name, _), weight in zip(contexts, weights):
    out[name] = {"loss": losses[name] / len(targets), "accuracy": correct[name] / len(targets),
                 "weight": weight}
  if ceiling is not None:
    nats, accuracy = ceiling(targets)
    out["grammar ceiling"] = {"loss": float(np.mean(nats)), "accuracy": float(np.mean(accuracy))}
  out["positions"] = int(len(targets))
  return out


def _real_positions(objective, inputs) -> np.ndarray:
  """Where a training target is a real position: not padding (token id 0) for tokens; everywhere
  for pixels (no padding)."""
  from spt_jax.objectives.masked import MaskedPixelPrediction
  if isinstance(objective, MaskedPixelPrediction):
    return np.ones(inputs.shape, bool)
  return inputs != 0


def for_phase(config, name: str, task) -> dict:
  """`levels` of phase `name` of `config` (an mlm phase) on `task`'s data, with the masks its
  evaluation draws."""
  from spt_jax import train
  from spt_jax.data import tasks
  from spt_jax.objectives.masked import MaskedPixelPrediction, pixel_outputs
  cfg = config[name]
  if cfg.objective != "mlm":
    raise ValueError(f"Reference levels are for masked pretraining (objective 'mlm'); phase "
                     f"{name!r} is {cfg.objective!r}.")
  objective = train.make_objective(config, name, task)
  eval_rng = train.evaluation_rng(config.seed, name)
  vocab = (pixel_outputs("ce") if isinstance(objective, MaskedPixelPrediction)
           else task.vocab.size)
  from spt_jax.analysis.attention import grid_width_of
  ceiling = tasks.get(config[cfg.data or "data"].task).masked_ceiling
  return levels(objective, objective.splits(task), eval_batch_size=cfg.eval_batch_size or
                cfg.batch_size, eval_rng=eval_rng, vocab=vocab,
                max_eval_batches=cfg.max_eval_batches, ceiling=ceiling,
                grid_width=grid_width_of(task))


def write(run: str, results: dict) -> str:
  path = os.path.join(run, LEVELS_FILE)
  with open(path, "w") as f:
    json.dump(results, f, indent=1)
  return path


def table(results: dict, run_loss: float | None = None, run_accuracy: float | None = None) -> str:
  """Markdown: each level's loss and accuracy, and the run's own (best validation) if given."""
  lines = ["| predictor | masked loss (nats) | masked accuracy |", "|---|---|---|"]
  for name, value in results.items():
    if isinstance(value, dict):
      lines.append(f"| {name} | {value['loss']:.3f} | {100 * value['accuracy']:.1f}% |")
  if run_loss is not None:
    lines.append(f"| **this run** (validation, best checkpoint) | **{run_loss:.3f}** | "
                 f"**{100 * run_accuracy:.1f}%** |")
  return "\n".join(lines) + f"\n\n{results.get('positions', 0):,} masked validation positions.\n"


def main(argv=None) -> None:
  import argparse
  import ml_collections
  from spt_jax.data import tasks
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--run", required=True, help="a pretraining phase's directory")
  args = parser.parse_args(argv)
  config = ml_collections.ConfigDict(json.load(open(os.path.join(args.run, "config.json"))))
  name = os.path.basename(os.path.normpath(args.run))
  task = tasks.load(config[config[name].data or "data"])
  results = for_phase(config, name, task)
  path = write(args.run, results)
  print(table(results))
  print(f"Written to {path}.")


if __name__ == "__main__":
  main()
