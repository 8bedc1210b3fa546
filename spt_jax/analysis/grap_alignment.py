r"""How well does each composite loss's gradient align with GraP's downstream gradient, and where?

  python -m spt_jax.analysis.grap_alignment --run=runs/listops_grap/pretrain --checkpoint=latest
  python -m spt_jax.analysis.grap_alignment --run=runs/synthetic_grap/pretrain --num_batches=32 \
    --out=runs/synthetic_grap/alignment.json

GraP (spt_jax/grap.py) weighs the losses by the cosine of their gradients with the downstream probe's
gradient in the space of the shared encoder output z. This tool measures that cosine on a checkpoint
of a GraP composite phase, batch by batch, in three spaces:

  z             the space GraP aligns in (dL/dz over every position of the batch)
  encoder       the encoder's parameters (each z-gradient pulled back through the encoder): what one
                encoder update along that loss does to the downstream loss, to first order
  attention_qk  the query and key kernels only: the score directions that label supervision alone
                cannot see from uniform attention (spt_jax/analysis/gradient_blindness.py)

and prints each loss's mean cosine with its standard error over the batches, next to the probe's
accuracy on them. A weighting can only rank losses whose mean cosines differ by more than a few
standard errors; a probe at chance accuracy has a gradient that carries no label signal, whatever
the space. Gradients are taken in eval mode (no dropout) on the labelled examples of the split that
GraP reads (the training split, first `grap.label_fraction` of it).
"""
from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from spt_jax import checkpoints, grap, train, tree
from spt_jax.analysis import read_phase_config
from spt_jax.objectives import composite
from spt_jax.objectives.composite import HEADS, PROBE
from spt_jax.data import pipeline, tasks

# Parameter-path patterns (whole-path regexes, as for freezing) of each space but z.
SPACES = {"z": None, "encoder": r".*", "attention_qk": r".*attention/(query|key)/.*"}


def _flat(grads, pattern: str) -> jax.Array:
  flat = tree.flatten(grads)
  paths = tree.match_patterns([pattern], flat, what="grap_alignment space")
  return jnp.concatenate([jnp.ravel(flat[p]) for p in paths])


def make_batch_statistics(comp: composite.Composite):
  """Jitted (params, batch, rng) → {space: [K] cosines with the probe gradient}, probe metrics."""
  names = comp.losses + (PROBE,)

  def statistics(params, batch, rng):
    batch = dict(batch, inputs=batch["inputs"].astype(jnp.int32))
    views = comp.views(rng, batch)
    z, encoder_vjp, mask = jax.vjp(
        lambda p: comp.encode(p, views["view1"], train=False, rng=rng), params["encoder"],
        has_aux=True)
    z2 = (comp.encode(params["encoder"], views["view2"], train=False, rng=rng)[0]
          if "view2" in views else None)
    per_loss = [comp.loss_grads(name, z, mask, params[HEADS], views, batch, z2=z2)
                for name in names]
    z_grads = [r[2] for r in per_loss]
    probe_metrics = per_loss[-1][1]  # the last name is the probe
    encoder_grads = [encoder_vjp(g)[0] for g in z_grads]
    vectors = {"z": [jnp.ravel(g) for g in z_grads]}
    for space, pattern in SPACES.items():
      if pattern is not None:
        vectors[space] = [_flat(g, pattern) for g in encoder_grads]
    # GraP's own cosines: each loss's gradient against the probe's (the last one).
    cosines = {space: grap.cosine_statistics(jnp.stack(vs[:-1]), vs[-1])[1]
               for space, vs in vectors.items()}
    return cosines, probe_metrics
  return jax.jit(statistics)


def measure(config, phase: str, params, *, num_batches: int, seed: int = 0) -> dict:
  """Per-loss alignment with the probe gradient over `num_batches` labelled training batches."""
  cfg = config[phase]
  composite.validate_phase(cfg, phase)
  if cfg.composite.weighting != "grap":
    raise ValueError(f"config.{phase}.composite.weighting={cfg.composite.weighting!r}: the "
                     f"alignment is measured against GraP's downstream probe, which only a "
                     f"weighting='grap' phase trains ({HEADS}/{PROBE}).")
  task = tasks.load(config[cfg.get("data") or "data"])  # The phase's own data section.
  comp = train.make_objective(config, phase, task)
  splits = comp.splits(task)
  statistics = make_batch_statistics(comp)
  batches = pipeline.train_batches(splits["train"], cfg.batch_size, seed=seed, start_step=0,
                                   process_index=0, process_count=1)
  per_batch = {space: [] for space in SPACES}
  correct = labelled = 0.0
  drawn = 0
  while len(per_batch["z"]) < num_batches:
    batch = next(batches)
    drawn += 1
    if drawn > 100 * num_batches:
      raise ValueError(f"Fewer than {num_batches} of {drawn} training batches carry a label "
                       f"(config.{phase}.grap.label_fraction={cfg.grap.label_fraction}).")
    if not (batch["label_weights"] * batch["weights"]).any():
      continue  # GraP skips such batches too.
    cosines, probe = jax.device_get(statistics(params, batch, jax.random.PRNGKey(drawn)))
    for space, values in cosines.items():
      per_batch[space].append(np.asarray(values, np.float64))
    correct += float(probe[f"{PROBE}_accuracy"][0])
    labelled += float(probe[f"{PROBE}_accuracy"][1])
  spaces = {}
  for space, rows in per_batch.items():
    a = np.stack(rows)
    se = a.std(0, ddof=1) / np.sqrt(len(a)) if len(a) > 1 else np.full(a.shape[1], np.nan)
    spaces[space] = {name: {"mean": float(m), "se": float(s), "per_batch": a[:, i].tolist()}
                     for i, (name, m, s) in enumerate(zip(comp.losses, a.mean(0), se))}
  return {"phase": phase, "losses": list(comp.losses), "num_batches": num_batches,
          "probe_accuracy": correct / max(labelled, 1.0), "labelled_examples": int(labelled),
          "num_classes": task.num_classes, "spaces": spaces}


def table(result: dict) -> str:
  head = "| space | " + " | ".join(result["losses"]) + " |"
  rows = [head, "|---" * (len(result["losses"]) + 1) + "|"]
  for space, per_loss in result["spaces"].items():
    cells = [f"{v['mean']:+.4f} ± {v['se']:.4f}" for v in per_loss.values()]
    rows.append(f"| {space} | " + " | ".join(cells) + " |")
  return "\n".join(rows)


def analyse(run: str, checkpoint: str, num_batches: int, seed: int = 0) -> dict:
  config, phase = read_phase_config(run)
  if config[phase].objective != "composite":
    raise ValueError(f"{run} is a phase with objective {config[phase].objective!r}; the alignment "
                     f"needs a composite GraP phase.")
  params_dir = checkpoints.resolve_params_dir(run, checkpoint)
  result = measure(config, phase, checkpoints.restore_item(params_dir), num_batches=num_batches,
                   seed=seed)
  result.update(run=os.path.abspath(run), checkpoint=params_dir)
  return result


# ---------------------------------------------------------------------------------------- CLI
FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line's flags; defined only when run as a program, so that importing this module
  next to spt_jax.analysis.__main__ (which also has --run) does not clash."""
  flags.DEFINE_string("run", None, "A composite GraP phase directory, e.g. runs/x/pretrain.")
  flags.DEFINE_string("checkpoint", "latest", "best, latest, init or a step number.")
  flags.DEFINE_integer("num_batches", 16, "Labelled training batches to average over.")
  flags.DEFINE_integer("seed", 0, "Seed of the batch order and the masks.")
  flags.DEFINE_string("out", None, "Optional JSON file for every per-batch cosine.")
  flags.mark_flags_as_required(["run"])


def main(argv):
  del argv
  result = analyse(FLAGS.run, FLAGS.checkpoint, FLAGS.num_batches, FLAGS.seed)
  print(f"{result['checkpoint']}: {result['num_batches']} batches, probe accuracy "
        f"{result['probe_accuracy']:.3f} on {result['labelled_examples']} labelled examples "
        f"({result['num_classes']} classes)")
  print("cosine with the probe gradient, mean ± standard error over batches:")
  print(table(result))
  if FLAGS.out:
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
    with open(FLAGS.out, "w") as f:
      json.dump(result, f, indent=1)
    print(f"wrote {FLAGS.out}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
