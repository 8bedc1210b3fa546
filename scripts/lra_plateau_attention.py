r"""The plateau-budget study's attention table (docs/lra_cpu.md): how near each arm's fine-tuned
attention looks, in one dimension (the flattened sequence) and, on images, two (the pixel grid).

  python scripts/lra_plateau_attention.py --workdir=~/spt_runs/lra_plateau --task=pathfinder \
      --out=docs/results/lra_plateau/pathfinder_attention

Per arm of configs/sweeps/lra_plateau.py's stages (mean ± std over the finished seeds), from the
best fine-tuning checkpoint's attention, every layer and head, on the first validation examples:

  1D band, 1D diag.   attention mass within |i − j| ≤ 1 of the flattened sequence, and diagonality
                      (1 − mean |i − j| ÷ uniform attention's: 0 uniform, 1 self only)
  2D band, 2D diag.   the same on the image grid (distance √(Δrow² + Δcolumn²); band 1.5: the pixel
                      and its 8 neighbours); images only
  entropy             the attention's normalised entropy (1 uniform, 0 one key): proximity alone
                      cannot tell uniform attention from sharp attention to distant pixels
  drawn mass          images only: the attention mass on the pixels that are drawn (value > 0: the
                      paths and dots, ~31% of a Pathfinder image), content rather than position
  test acc., q·k = 0  the checkpoint's test accuracy with W_Q, its bias and W_K zeroed
                      (spt_jax/analysis/ablation.py): chance if the model needs its query-key
                      attention, unchanged if it classifies without it
  and, for arms that load a pretrained encoder, the proximity of the loaded (hand-off) parameters
  (`*_loaded`), i.e. what fine-tuning started from.

Sinusoidal SPT's proximity is two-dimensional (peaks at the pixel below as well as the one to the
right), which a 1D band understates; ALiBi's and RoPE's 1D biases cannot express it. Writes
`<out>/table.md` and `<out>/rows.json`.

Each run's row is kept in its fine-tuning directory (`attention_proximity.json`, with the best
step it was measured at), which scripts/run_records.py saves: the checkpoints it is read from are
not in the records, so a run restored from them is tabulated from its kept row, and a run with
neither (finished before rows were kept, its workdir since lost) is left out with a warning. An
existing `<out>/rows.json` is merged, not overwritten: an arm it has on more seeds than the workdir
can measure keeps its row there.
scripts/lra_plateau_study.sh writes the rows after every sweep, while the checkpoints exist.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from lra_plateau_figure import arms  # noqa: E402  (every arm of the study's stages, in order)
from spt_jax import checkpoints, config_lib, train  # noqa: E402
from spt_jax.analysis import ablation, attention, read_phase_config  # noqa: E402
from spt_jax.data import tasks  # noqa: E402
from spt_jax.data.vocab import PAD_ID  # noqa: E402

EXAMPLES = 32
METRICS = ("band_1d", "diag_1d", "band_2d", "diag_2d")
ROW_FILE = "attention_proximity.json"  # in a run's fine-tuning directory


def proximity(model, params, tokens, mask, grid: int) -> dict[str, float]:
  """1D and (grid > 0) 2D band mass and diagonality of every layer's attention, all heads."""
  maps = attention.attention_maps(model, params, tokens)
  out = {}
  for suffix, band, width in (("1d", 1, 0), ("2d", attention.GRID_BAND, grid)):
    if suffix == "2d" and not grid:
      continue
    per_layer = [attention.proximity_metrics(np.asarray(m), mask, band, grid_width=width)
                 for m in maps]
    out[f"band_{suffix}"] = float(np.mean([m["band_mass"] for m in per_layer]))
    out[f"diag_{suffix}"] = float(np.mean([m["diagonality"] for m in per_layer]))
  out["entropy"] = float(np.mean([attention.normalised_entropy(m, mask) for m in maps]))
  if grid:
    drawn = (tokens > 0)[:, None, None, :]
    out["drawn_mass"] = float(np.mean([(np.asarray(m) * drawn).sum(-1).mean() for m in maps]))
    out["drawn_share"] = float((tokens > 0).mean())
  return out


def run_row(run: str) -> dict | None:
  """One finished run's metrics, measured once and kept in ROW_FILE (None while it has not
  finished fine-tuning, or where neither its checkpoints nor a kept row are left)."""
  results_path = os.path.join(run, "results.json")
  if not os.path.exists(results_path) or "finetune" not in json.load(open(results_path)):
    return None
  finetune = os.path.join(run, "finetune")
  kept_path = os.path.join(finetune, ROW_FILE)
  kept = json.load(open(kept_path)) if os.path.exists(kept_path) else None
  if not os.path.isdir(os.path.join(finetune, "checkpoints")):  # restored from records
    if kept is None:
      print(f"warning: {run} has no fine-tuning checkpoints and no kept {ROW_FILE}: left out",
            file=sys.stderr)
    return kept and kept["row"]
  best_dir = checkpoints.resolve_params_dir(finetune, "best")
  best_step = int(os.path.basename(os.path.dirname(best_dir)))
  if kept is not None and kept["best_step"] == best_step:
    return kept["row"]
  row = measure(run, finetune)
  with open(kept_path, "w") as f:
    json.dump({"best_step": best_step, "row": row}, f, indent=1)
  return row


def measure(run: str, finetune: str) -> dict:
  """The row of `run` from its checkpoints: the best fine-tuning one and, where the run loaded
  parameters, the ones it started from."""
  results_path = os.path.join(run, "results.json")
  config, phase = read_phase_config(finetune)
  task = tasks.load(config[config[phase].get("data") or "data"])
  model = train.make_objective(config, phase, task).attention_model
  tokens = task.splits["val"]["inputs"][:EXAMPLES].astype(np.int32)
  mask = tokens != PAD_ID if task.input_kind == "tokens" else np.ones(tokens.shape, bool)
  grid = attention.grid_width_of(task)
  restore = lambda kind: checkpoints.restore_item(checkpoints.resolve_params_dir(finetune, kind))
  best = restore("best")
  row = proximity(model, best, tokens, mask, grid)
  results = json.load(open(results_path))
  if "pretrain" in results or config[phase].init_from.source:
    row.update({f"{k}_loaded": v
                for k, v in proximity(model, restore("init"), tokens, mask, grid).items()})
  row["test_accuracy"] = results["finetune"]["test_of_best"]["accuracy"]
  row["test_accuracy_qk_zeroed"] = ablation.ablate_loaded(config, phase, task, best, ("qk",))[
      "ablations"]["qk"]["metrics"]["accuracy"]
  return row


def table(workdir: str, task: str) -> list[dict]:
  seeds = config_lib.load_config(f"configs/sweeps/lra_plateau.py:{task},a").seeds
  rows = []
  for arm in arms(task):
    found = [r for r in (run_row(os.path.join(workdir, task, arm, f"seed_{s}")) for s in seeds)
             if r is not None]
    if not found:
      continue
    row = {"arm": arm, "seeds": len(found)}
    for key in found[0]:
      values = np.asarray([r[key] for r in found if key in r], float)
      row[key] = (float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else 0.0)
    rows.append(row)
  return rows


def merge(previous: list[dict], rows: list[dict], task: str) -> list[dict]:
  """`rows`, with each arm of an earlier table (`previous`, e.g. the committed one) kept where the
  workdir now measures it on fewer seeds or not at all: runs restored from records without a kept
  row, or a workdir lost, never shrink a table. In the study's arm order."""
  new = {r["arm"]: r for r in rows}
  for old in previous:
    if old["arm"] not in new or new[old["arm"]]["seeds"] < old["seeds"]:
      print(f"note: {old['arm']}'s row ({old['seeds']} seeds) kept from the earlier table",
            file=sys.stderr)
      new[old["arm"]] = old
  order = {arm: i for i, arm in enumerate(arms(task))}
  return sorted(new.values(), key=lambda r: order.get(r["arm"], len(order)))


def markdown(rows: list[dict], task: str) -> str:
  images = any("band_2d" in r for r in rows)
  keys = [k for k in METRICS if images or k.endswith("1d")]
  drawn = any("drawn_mass" in r for r in rows)
  head = (["arm", "seeds", "test accuracy (%)", "test acc., q·k = 0 (%)", "entropy"]
          + (["drawn mass"] if drawn else [])
          + [k.replace("_", " ") for k in keys] + [f"{k.replace('_', ' ')}, loaded" for k in keys])
  caption = (f"{task}: attention proximity of the best fine-tuning checkpoint, all layers and "
             f"heads, {EXAMPLES} validation examples (mean ± std over seeds; `loaded`: the "
             "parameters fine-tuning started from, for arms that load them).")
  if task == "pathfinder" and drawn:
    caption += (" Uniform attention over the 16×16 grid has 2D band ≈ 0.032, 1D band ≈ 0.012, "
                "entropy 1 and drawn mass the drawn pixels' share "
                f"({rows[0]['drawn_share'][0]:.2f} of these examples' pixels).")
  lines = [caption, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    # One seed has no spread to show.
    pm = lambda pair, scale=1.0, d=3, n=r["seeds"]: (
        f"{scale * pair[0]:.{d}f} ± {scale * pair[1]:.{d}f}" if n > 1 else f"{scale * pair[0]:.{d}f}")
    cells = [r["arm"], str(r["seeds"]), pm(r["test_accuracy"], 100, 1),
             pm(r["test_accuracy_qk_zeroed"], 100, 1), pm(r["entropy"])]
    cells += [pm(r["drawn_mass"])] if drawn else []
    cells += [pm(r[k]) for k in keys]
    cells += [pm(r[f"{k}_loaded"]) if f"{k}_loaded" in r else "–" for k in keys]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--task", choices=("listops", "pathfinder"), required=True)
  parser.add_argument("--out", required=True)
  args = parser.parse_args(argv)
  rows = table(os.path.expanduser(args.workdir), args.task)
  rows_path = os.path.join(args.out, "rows.json")
  if os.path.exists(rows_path):
    rows = merge(json.load(open(rows_path)), rows, args.task)
  os.makedirs(args.out, exist_ok=True)
  with open(rows_path, "w") as f:
    json.dump(rows, f, indent=2)
  text = markdown(rows, args.task)
  with open(os.path.join(args.out, "table.md"), "w") as f:
    f.write(text)
  print(text)


if __name__ == "__main__":
  main()
