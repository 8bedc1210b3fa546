r"""Attention analysis of a checkpoint: heatmaps, position figures and proximity metrics.

  python -m spt_jax.analysis --run=runs/synthetic_spt/finetune --out=runs/analysis/spt
  python -m spt_jax.analysis --run=runs/synthetic_scratch/finetune --checkpoint=init --out=...

Writes `attention_layer<l>.png` (mean map per head over the examples), the figures of the model's
position encoding (`attention.position_figures`, one PNG per layer, e.g. `position_layer<l>.png`
with (P W_Q)(P W_K)ᵀ/√d per head for additive codes) and `metrics.json` (per layer and head: mean
distance, band mass, diagonality; per layer under "position" the numbers the position figure shows;
the run, checkpoint and split they came from). On image data (pixels, a square length) also the
same metrics on the pixel grid (`grid_mean_distance`, `grid_band_mass` within 1.5 pixels: the 8
neighbours, `grid_diagonality`) and `position_grid_layer<l>.png`: the position figure's numbers by
grid offset (Δrow, Δcolumn), under "position_grid". Under "representation": the participation
ratio of the pooled encoder output at the checkpoint and at the phase's init checkpoint (for a
fine-tuning, the loaded parameters), their ENSD and eigenvalue spectra (`representations.py`),
drawn in `representation.png`.
"""
from __future__ import annotations

import json
import os

import numpy as np
from absl import app, flags

from spt_jax import checkpoints, train
from spt_jax.analysis import attention, plots, read_phase_config, representations
from spt_jax.data import tasks
from spt_jax.data.vocab import PAD_ID

flags.DEFINE_string("run", None, "A phase directory of a run, e.g. runs/x/finetune.")
flags.DEFINE_string("checkpoint", "best", "best, latest, init or a step number.")
flags.DEFINE_string("out", None, "Directory for the PNGs and metrics.json.")
flags.DEFINE_string("split", "val", "Data split the examples come from.")
flags.DEFINE_integer("num_examples", 16, "Examples to average the maps over.")
flags.DEFINE_integer("band", 1, "Band |i-j| <= band for the band-mass metric.")
flags.DEFINE_integer("representation_examples", 512, "The fixed sample (the split's first examples) "
                     "whose pooled encoder outputs give PR and ENSD.")
flags.mark_flags_as_required(["run", "out"])
FLAGS = flags.FLAGS


def analyse(run: str, checkpoint: str, out: str, split: str, num_examples: int, band: int,
            representation_examples: int = 512) -> dict:
  config, phase = read_phase_config(run)
  # The phase's own data: a cross-task SPT pretraining read another section (config.<phase>.data).
  task = tasks.load(config[config[phase].get("data") or "data"])
  model = train.make_objective(config, phase, task).attention_model
  if model is None:
    raise ValueError(f"{run}: objective {config[phase].objective!r} has no attention maps to "
                     f"analyse.")
  params_dir = checkpoints.resolve_params_dir(run, checkpoint)
  params = checkpoints.restore_item(params_dir)
  tokens = task.splits[split]["inputs"][:num_examples].astype(np.int32)
  maps = [np.asarray(m) for m in attention.attention_maps(model, params, tokens)]
  mask = tokens != PAD_ID if task.input_kind == "tokens" else np.ones(tokens.shape, bool)
  os.makedirs(out, exist_ok=True)
  result = {"run": os.path.abspath(run), "checkpoint": params_dir, "split": split,
            "num_examples": int(len(tokens)), "band": band, "layers": []}
  real_length = int(mask.sum(1).max())
  # On images also the same metrics on the pixel grid (Euclidean distance, band 1.5: the 8
  # neighbours), where a learnt proximity is two-dimensional.
  grid = attention.grid_width_of(task)
  result["grid_width"] = grid

  def metrics(weights):
    out = {k: float(v) for k, v in attention.proximity_metrics(weights, mask, band).items()}
    if grid:
      out.update({f"grid_{k}": float(v) for k, v in attention.proximity_metrics(
          weights, mask, attention.GRID_BAND, grid_width=grid).items()})
    return out

  for layer, m in enumerate(maps):
    per_head = [metrics(m[:, h]) for h in range(m.shape[1])]
    result["layers"].append({"layer": layer, "overall": metrics(m), "heads": per_head})
    mean_map = m.mean(0)[:, :real_length, :real_length]
    plots.heatmaps(mean_map, os.path.join(out, f"attention_layer{layer}.png"),
                   f"{phase} ({checkpoint}) layer {layer}: attention averaged over "
                   f"{len(tokens)} {split} examples",
                   labels=[f"head {h}: diag {s['diagonality']:.2f}" for h, s in enumerate(per_head)])
  figures = attention.position_figures(model, params, tokens, mask, out, f"{phase} ({checkpoint})")
  for entry, numbers in zip(result["layers"], figures):
    entry["position"] = numbers
  if grid:
    grid_figures = attention.grid_position_figures(model, params, tokens, mask, grid, out,
                                                   f"{phase} ({checkpoint})")
    for entry, numbers in zip(result["layers"], grid_figures):
      entry["position_grid"] = numbers
  # The representation's PR, and against the loaded (init) parameters its ENSD (representations.py).
  sample = task.splits[split]["inputs"][:representation_examples].astype(np.int32)
  named = {checkpoint: representations.pooled_features(model, params, sample)}
  if checkpoint != "init":
    try:
      init = checkpoints.restore_item(checkpoints.resolve_params_dir(run, "init"))
      named = {"init": representations.pooled_features(model, init, sample), **named}
    except (FileNotFoundError, ValueError) as e:  # a run without an init checkpoint: PR alone
      result["representation_note"] = f"no init checkpoint ({e})"
  result["representation"] = representations.compare(named)
  representations.figure(result["representation"], os.path.join(out, "representation.png"),
                         f"{phase}: pooled encoder output, {len(sample)} {split} examples")
  with open(os.path.join(out, "metrics.json"), "w") as f:
    json.dump(result, f, indent=2)
  return result


def main(argv):
  del argv
  result = analyse(FLAGS.run, FLAGS.checkpoint, FLAGS.out, FLAGS.split, FLAGS.num_examples,
                   FLAGS.band, FLAGS.representation_examples)
  rep = result["representation"]
  print("representation: PR " + ", ".join(f"{k} {v:.2f}" for k, v in rep["pr"].items())
        + "".join(f"; ENSD({k.replace('|', ', ')}) {v:.2f}" for k, v in rep["ensd"].items()))
  for layer in result["layers"]:
    print(f"layer {layer['layer']}: " + ", ".join(f"{k}={v:.3f}" for k, v in layer["overall"].items()))
  print(f"wrote {FLAGS.out}")


if __name__ == "__main__":
  app.run(main)
