r"""The init-scale study's table and figure (configs/sweeps/init_scales.py; docs/theory.md, "From
diagonal networks to Transformers"): per arm, mean ± std over the seeds of

  test accuracy       the fine-tuning's test accuracy at its best validation checkpoint
  steps to            the first fine-tuning step whose validation accuracy reaches the sweep's
                      `steps_to` threshold (and in how many seeds it did)
  band mass, distance the loaded (hand-off) parameters' attention, layer 0, on the validation split:
                      the mass within |i − j| ≤ 1 and the mean |i − j| (on images: on the pixel grid,
                      within 1.5 pixels, `python -m spt_jax.analysis`), i.e. what a rescale did to
                      the learned proximity before any fine-tuning step
  PR loaded, PR tuned the participation ratio of the pooled encoder output at the hand-off and at the
                      best fine-tuning checkpoint (spt_jax/analysis/representations.py)
  ENSD                shared dimensions of the fine-tuned representation with the *pretrained* one
                      (the `spt` arm's hand-off of the same seed, the same for every arm), the
                      "pretraining-dependent rich" signature: low PR tuned with high ENSD

  python scripts/init_scales_report.py --sweep=configs/sweeps/init_scales.py:synthetic \
      --workdir=~/spt_runs/init_scales --out=docs/results/init_scales/synthetic

Writes `<out>/table.md`, `<out>/rows.json` and `<out>/summary.png`; an arm's seeds that have not
finished are left out, and the table says how many each arm has. `<out>/runs.json` lists every run
that reached the threshold with its measured columns, and the table's last line says whether they
order the accuracy across runs (Spearman's ρ with ENSD, PR tuned and the change in PR). The measured columns need a run's
hand-off and best checkpoints; each run's are kept in its `finetune/init_scales_row.json` (which
`scripts/run_records.py` saves), so they outlive the checkpoints: run the report while they exist
(`scripts/lra_plateau_study.sh` does after each init-scale sweep). ENSD's pretrained
representation is the `spt` arm's hand-off, or where its checkpoints are gone (runs restored from
records) that of another arm whose loaded encoder is the same (`unscaled_arms`: γ_FT, data size),
or where none of those remains the SPT checkpoint itself (the records keep it), loaded as a
rescaled arm's fine-tuning loaded it but without the rescale: the same encoder.

With `--full_data=<the scales sweep's rows.json>` on a `data` sweep it also draws
`<out>/by_data_size.png`: test accuracy, PR tuned and ENSD against the readout's scale (γ_FT, and
the model's own readout at its initialisation's std), one line per fine-tuning set size, the
scales sweep's arms giving 100%.

With `--handoff` it reads only the `spt` arm's hand-off and applies each arm's init-scale settings
to it (`spt_jax.init_from.apply_scales`, what the arm's fine-tuning would start from): the band
mass, mean distance and PR at the hand-off of every arm before any of its runs exists, so that a
prediction can rest on them, and per attention layer the entropy of its maps and the slope and
correlation of its logits against `spt`'s: what a rescale does to each layer's softmax temperature
and pattern (`<out>/handoff.md`, `<out>/handoff.json`). γ_FT re-draws only the
readout, which neither column sees, so the γ arms are left out.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from spt_jax import checkpoints, config_lib, init_from, sweep, train  # noqa: E402
from spt_jax.analysis import attention, plots, read_phase_config, representations  # noqa: E402
from spt_jax.data import tasks  # noqa: E402
from spt_jax.data.vocab import PAD_ID  # noqa: E402

ATTENTION_EXAMPLES = 16
REPRESENTATION_EXAMPLES = 512
MEASURED = ("band_mass", "mean_distance", "pr_loaded", "pr_tuned", "ensd")
COLUMNS = ("test_accuracy",) + MEASURED
# init_from settings that leave the loaded encoder as SPT left it: γ_FT re-draws only the readout,
# which neither the attention nor the pooled representation sees.
SAME_ENCODER_FIELDS = {"source", "gamma_ft"}
# init_from settings that only rescale what is loaded (applied after loading, so loading without
# them gives the unscaled arms' encoder).
SCALE_FIELDS = {"rescale", "rescale_paths", "relative_scale", "relative_scale_earlier",
                "relative_scale_later"}
SOURCE_REFERENCE = "the SPT checkpoint"  # ENSD's reference where no unscaled arm's hand-off remains
ROW_FILE = "init_scales_row.json"  # an arm's measured columns at a seed, kept for the records


class Phase:
  """A fine-tuning phase's model and validation sample, built once per seed: every arm of a seed
  shares the model (only its parameters differ)."""

  def __init__(self, run: str):
    config, phase = read_phase_config(run)
    self.task = tasks.load(config[config[phase].get("data") or "data"])
    self.model = train.make_objective(config, phase, self.task).attention_model
    val = self.task.splits["val"]["inputs"]
    self.tokens = val[:ATTENTION_EXAMPLES].astype(np.int32)
    self.sample = val[:REPRESENTATION_EXAMPLES].astype(np.int32)
    self.mask = (self.tokens != PAD_ID if self.task.input_kind == "tokens"
                 else np.ones(self.tokens.shape, bool))
    self.grid = attention.grid_width_of(self.task)

  def params(self, run: str, checkpoint: str):
    return checkpoints.restore_item(checkpoints.resolve_params_dir(run, checkpoint))

  def proximity(self, params, maps=None) -> dict:
    """Layer 0's attention, all heads: band mass and mean distance (on the grid for images);
    `maps`: the per-layer maps of `params`, where already computed."""
    if maps is None:
      maps = attention.attention_maps(self.model, params, self.tokens)
    maps = np.asarray(maps[0])
    if self.grid:
      m = attention.proximity_metrics(maps, self.mask, attention.GRID_BAND, grid_width=self.grid)
    else:
      m = attention.proximity_metrics(maps, self.mask, 1)
    return {"band_mass": float(m["band_mass"]), "mean_distance": float(m["mean_distance"])}

  def layers_against(self, params, reference_logits) -> dict:
    """Layer 0's proximity, and per layer the attention's normalised entropy and the slope and
    correlation of its logits against `reference_logits` (another parameter set's, on these
    tokens)."""
    maps = attention.attention_maps(self.model, params, self.tokens)
    logits = attention.attention_logits(self.model, params, self.tokens)
    aligned = [attention.logit_alignment(ref, np.asarray(x), self.mask)
               for ref, x in zip(reference_logits, logits)]
    return {**self.proximity(params, maps),
            "entropy": [attention.normalised_entropy(m, self.mask) for m in maps],
            "logit_slope": [a["slope"] for a in aligned],
            "logit_correlation": [a["correlation"] for a in aligned]}

  def features(self, params):
    return representations.pooled_features(self.model, params, self.sample)


def _has_checkpoints(finetune: str) -> bool:
  return all(os.path.isdir(os.path.join(finetune, "checkpoints", c)) for c in ("init", "best"))


def seed_row(workdir: str, arm: str, seed: int, phase: Phase | None, pretrained,
             reference: str | None, threshold: float) -> dict | None:
  """The arm's row at `seed`: test accuracy and steps to the threshold from its results, the
  measured columns from its hand-off and best checkpoints while they exist (kept in
  `finetune/ROW_FILE`, which run records keep), from that file once they are gone, and none
  where neither exists (a run restored from records before this report measured it)."""
  run = os.path.join(workdir, arm, f"seed_{seed}")
  results_path = os.path.join(run, "results.json")
  if not os.path.exists(results_path) or "finetune" not in json.load(open(results_path)):
    return None
  results = json.load(open(results_path))["finetune"]
  finetune = os.path.join(run, "finetune")
  row = {"test_accuracy": results["test_of_best"]["accuracy"],
         "steps_to": sweep.steps_to(run, threshold)}
  kept = os.path.join(finetune, ROW_FILE)
  if phase is not None and _has_checkpoints(finetune):
    loaded, tuned = phase.params(finetune, "init"), phase.params(finetune, "best")
    loaded_x, tuned_x = phase.features(loaded), phase.features(tuned)
    measured = {**phase.proximity(loaded),
                "pr_loaded": representations.participation_ratio(loaded_x),
                "pr_tuned": representations.participation_ratio(tuned_x)}
    if pretrained is not None:
      measured.update(ensd=representations.ensd(pretrained, tuned_x), ensd_reference=reference)
    elif os.path.exists(kept):  # the same checkpoints' ENSD, measured while a reference existed
      measured = {**json.load(open(kept)), **measured}
    with open(kept, "w") as f:
      json.dump(measured, f, indent=2)
  elif os.path.exists(kept):
    measured = json.load(open(kept))
  else:
    measured = {}
  return {**row, **{k: v for k, v in measured.items() if k in MEASURED or k == "ensd_reference"}}


def _init_from_fields(overrides) -> set[str]:
  return {k.removeprefix("finetune.init_from.") for k in overrides
          if k.startswith("finetune.init_from.")}


def rescaled_arms(sw) -> list[str]:
  """The arms that load as the unscaled arms do and then only rescale what they loaded."""
  arms = []
  for spec in sw.runs:
    name, overrides = sweep.parse_run(spec)
    fields = _init_from_fields(overrides)
    if (fields & SCALE_FIELDS and fields <= SAME_ENCODER_FIELDS | SCALE_FIELDS
        and not any(k.startswith("model.") for k in overrides)):
      arms.append(name)
  return arms


def _pretrained_from_source(phase: "Phase", finetune: str):
  """The pretrained representation from the SPT checkpoint a rescaled arm's run at `finetune`
  loaded: its hand-off with the loaded leaves read again, unscaled (the readout, which the pooled
  representation does not see, stays the run's). None where the checkpoint is not there."""
  config, name = read_phase_config(finetune)
  init_cfg = config[name].init_from
  try:
    loaded, _ = init_from.load_into(
        phase.params(finetune, "init"), init_cfg, workdir=os.path.dirname(finetune),
        phase_names=config_lib.phase_names(config), phase=name)
  except FileNotFoundError:
    return None
  return phase.features(loaded)


def unscaled_arms(sw) -> list[str]:
  """The arms whose encoder at the hand-off is the SPT checkpoint's as loaded, `spt` first: every
  arm that neither rescales nor filters what it loads nor changes the model (the fine-tuning data
  size acts after the hand-off). Any of them gives the pretrained representation ENSD compares
  with, so it survives the loss of `spt`'s own checkpoints (runs restored from records)."""
  arms = []
  for spec in sw.runs:
    name, overrides = sweep.parse_run(spec)
    fields = _init_from_fields(overrides)
    if fields <= SAME_ENCODER_FIELDS and not any(k.startswith("model.") for k in overrides):
      arms.append(name)
  return sorted(arms, key=lambda a: a != "spt")


def _handoffs(workdir: str, seed: int, arms):
  """(the first of `arms` whose fine-tuning at `seed` still has its hand-off checkpoint, its
  phase directory), or None."""
  for arm in arms:
    finetune = os.path.join(workdir, arm, f"seed_{seed}", "finetune")
    if os.path.isdir(os.path.join(finetune, "checkpoints", "init")):
      return arm, finetune
  return None


def report(sw, workdir: str, out: str, source: str) -> list[dict]:
  """The rows of sweep config `sw` (named `source` in the table) over `workdir`, written to `out`."""
  arms = [sweep.parse_run(r)[0] for r in sw.runs]
  per_arm = {arm: [] for arm in arms}
  for seed in sw.seeds:
    # The seed's model and sample from the reference run, else from a rescaled arm's run (then
    # the reference is the SPT checkpoint it loaded), else from any run with checkpoints (then
    # without ENSD, which needs the reference).
    found = _handoffs(workdir, seed, unscaled_arms(sw))
    rescaled = None if found else _handoffs(workdir, seed, rescaled_arms(sw))
    any_run = found or rescaled or _handoffs(workdir, seed, arms)
    phase = Phase(any_run[1]) if any_run else None
    pretrained, reference = None, None
    if found:
      pretrained, reference = phase.features(phase.params(found[1], "init")), found[0]
    elif rescaled:
      pretrained = _pretrained_from_source(phase, rescaled[1])
      reference = SOURCE_REFERENCE if pretrained is not None else None
    for arm in arms:
      row = seed_row(workdir, arm, seed, phase, pretrained, reference, sw.steps_to)
      if row is not None:
        per_arm[arm].append({"seed": seed, **row})
  rows = []
  for arm, seeds in per_arm.items():
    if not seeds:
      continue
    row = {"arm": arm, "seeds": len(seeds),
           "ensd_reference": sorted({s["ensd_reference"] for s in seeds if "ensd_reference" in s})}
    for key in COLUMNS:
      values = np.asarray([s[key] for s in seeds if key in s], float)
      row[key] = ((float(values.mean()), float(values.std()), len(values)) if len(values)
                  else None)
    reached = [s["steps_to"] for s in seeds if s["steps_to"] is not None]
    row["steps_to"] = (float(np.mean(reached)) if reached else None,
                       float(np.std(reached)) if reached else None, f"{len(reached)}/{len(seeds)}")
    rows.append(row)
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, "rows.json"), "w") as f:
    json.dump(rows, f, indent=2)
  across = across_runs(per_arm)
  with open(os.path.join(out, "runs.json"), "w") as f:
    json.dump(across, f, indent=2)
  write_table(rows, sw, source, os.path.join(out, "table.md"), across)
  draw(rows, sw.title, os.path.join(out, "summary.png"), sw.steps_to)
  return rows


def across_runs(per_arm) -> dict:
  """Every run that reached the threshold, whatever its arm, with its measured columns: does the
  representation's signature order the accuracy? Spearman's ρ (and p) of test accuracy with
  ENSD, PR tuned and PR tuned − PR loaded, and in how many runs PR fell."""
  from scipy import stats  # a dependency of jax
  runs = [{"arm": arm, **{k: s[k] for k in ("seed", "test_accuracy", "pr_loaded", "pr_tuned",
                                              "ensd")}}
          for arm, seeds in per_arm.items() for s in seeds
          if s["steps_to"] is not None and all(k in s for k in ("pr_loaded", "pr_tuned", "ensd"))]
  for r in runs:
    r["pr_change"] = r["pr_tuned"] - r["pr_loaded"]
  spearman = {}
  if len(runs) >= 3:
    accuracy = [r["test_accuracy"] for r in runs]
    for key in ("ensd", "pr_tuned", "pr_change"):
      values = [r[key] for r in runs]
      if len(set(accuracy)) > 1 and len(set(values)) > 1:  # else ρ is undefined
        rho, p = stats.spearmanr(accuracy, values)
        spearman[key] = {"rho": float(rho), "p": float(p)}
  return {"runs": runs, "pr_fell": sum(r["pr_change"] < 0 for r in runs), "spearman": spearman}


HANDOFF_COLUMNS = ("band_mass", "mean_distance", "pr_loaded")
# Per attention layer: the entropy of its maps, and its logits against the `spt` hand-off's (the
# same inputs): their slope (the temperature a rescale set) and correlation (whether the pattern
# survived the change of that layer's inputs).
HANDOFF_LAYER_COLUMNS = ("entropy", "logit_slope", "logit_correlation")


def handoff(sw, workdir: str, out: str, source: str) -> list[dict]:
  """The hand-off of `spt` and of each arm that differs from it only by rescaling what it loads,
  made from the `spt` arm's of the same seed by the arm's own settings; per arm mean ± std over
  the seeds whose `spt` run has finished. Arms that load otherwise (γ_FT, include/exclude), change
  the model, or differ only after the hand-off (fine-tuning data, budgets) are left out."""
  arms = {}
  for spec in sw.runs:
    name, overrides = sweep.parse_run(spec)
    scales = {k.removeprefix("finetune.init_from."): v for k, v in overrides.items()
              if k.startswith("finetune.init_from.") and k != "finetune.init_from.source"}
    other_model = any(k.startswith("model.") for k in overrides)
    if name == "spt" or (scales and set(scales) <= SCALE_FIELDS and not other_model):
      arms[name] = scales
  per_arm = {arm: [] for arm in arms}
  for seed in sw.seeds:
    found = _handoffs(workdir, seed, unscaled_arms(sw))
    if not found:
      continue
    reference = found[1]
    phase = Phase(reference)
    config, _ = read_phase_config(reference)
    loaded = phase.params(reference, "init")
    spt_logits = [np.asarray(x) for x in attention.attention_logits(phase.model, loaded,
                                                                    phase.tokens)]
    # Today's init_from fields, the run's values where it has them (a run from before a field
    # existed ran with its default), except the reference arm's own readout re-draw (a γ arm's),
    # which the hand-off's columns do not see.
    fields = config_lib.phase_config("classification").init_from
    for key, value in config.finetune.init_from.items():
      if key != "gamma_ft":
        fields[key] = tuple(value) if isinstance(value, list) else value
    for arm, scales in arms.items():
      arm_fields = copy.deepcopy(fields)
      sweep.apply_overrides(arm_fields, scales)
      params, _ = init_from.apply_scales(loaded, arm_fields, None, phase="finetune")
      per_arm[arm].append({"seed": seed, **phase.layers_against(params, spt_logits),
                           "pr_loaded": representations.participation_ratio(
                               phase.features(params))})
  stats = lambda values: (float(np.mean(values)), float(np.std(values)))
  rows = [{"arm": arm, "seeds": len(seeds),
           **{k: stats([s[k] for s in seeds]) for k in HANDOFF_COLUMNS},
           **{k: [stats(layer) for layer in zip(*(s[k] for s in seeds))]
              for k in HANDOFF_LAYER_COLUMNS},
           "per_seed": seeds}
          for arm, seeds in per_arm.items() if seeds]
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, "handoff.json"), "w") as f:
    json.dump(rows, f, indent=2)
  lines = [f"# {sw.title}: the hand-off of each arm, before fine-tuning", "",
           f"`python scripts/init_scales_report.py --sweep={source} --handoff ...`; each arm's "
           f"init-scale settings applied to the `spt` arm's hand-off; mean ± std (ddof 0) over "
           f"seeds {tuple(sw.seeds)}. Proximity: the loaded attention, layer 0.", "",
           "Per layer (0 / 1 / ...): the normalised entropy of its attention (1 uniform, 0 one "
           "key); the least-squares slope of its row-centred logits on the `spt` hand-off's "
           "(the factor a rescale put on that layer's logits) and their correlation (1: the "
           "same pattern; lower where the layer's inputs changed).", "",
           "| arm | seeds | band mass | mean distance | PR loaded | entropy per layer | "
           "logit slope vs spt per layer | logit correlation with spt per layer |",
           "|---|---|---|---|---|---|---|---|"]
  per_layer = lambda values, digits: " / ".join(_pm(v, digits=digits) for v in values)
  lines += [f"| {r['arm']} | {r['seeds']} | {_pm(r['band_mass'], digits=3)} | "
            f"{_pm(r['mean_distance'])} | {_pm(r['pr_loaded'])} | "
            f"{per_layer(r['entropy'], 2)} | {per_layer(r['logit_slope'], 2)} | "
            f"{per_layer(r['logit_correlation'], 2)} |" for r in rows]
  with open(os.path.join(out, "handoff.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  return rows


def _pm(value, scale=1.0, digits=2, seeds=None):
  """mean ± std; '—' where no seed has it; the seed count where fewer than `seeds` have it."""
  if value is None:
    return "—"
  text = f"{scale * value[0]:.{digits}f} ± {scale * value[1]:.{digits}f}"
  return text if seeds is None or len(value) < 3 or value[2] == seeds else f"{text} ({value[2]})"


def write_table(rows, sw, source: str, path: str, across: dict | None = None) -> None:
  lines = [f"# {sw.title}", "",
           f"`python scripts/init_scales_report.py --sweep={source} ...`; mean ± std (ddof 0, "
           f"as the sweep's tables) over seeds {tuple(sw.seeds)}. Proximity: the loaded "
           "attention, layer 0, before fine-tuning. "
           "A measured column reads a run's checkpoints (or the row kept from them); where some "
           "seeds have neither, it says in how many seeds it was measured. ENSD is taken against "
           "the pretrained representation: the hand-off of `spt`, or where its checkpoints are "
           f"gone of the first of {', '.join(unscaled_arms(sw)[1:])} that has one, or where "
           "none has one the SPT checkpoint the rescaled arms loaded, read without the rescale.",
           "", f"| arm | seeds | test accuracy (%) | steps to {sw.steps_to:.0%} val | band mass | "
           "mean distance | PR loaded | PR tuned | ENSD(pretrained, tuned) |",
           "|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    mean, std, reached = r["steps_to"]
    steps = f"— ({reached})" if mean is None else f"{mean:,.0f} ± {std:,.0f} ({reached})"
    n = r["seeds"]
    lines.append(f"| {r['arm']} | {n} | {_pm(r['test_accuracy'], 100)} | {steps} | "
                 f"{_pm(r['band_mass'], digits=3, seeds=n)} | {_pm(r['mean_distance'], seeds=n)} | "
                 f"{_pm(r['pr_loaded'], seeds=n)} | {_pm(r['pr_tuned'], seeds=n)} | "
                 f"{_pm(r['ensd'], seeds=n)} |")
  if across and across["runs"]:
    rho = lambda key: (f"{across['spearman'][key]['rho']:.2f} (p {across['spearman'][key]['p']:.2f})"
                       if key in across["spearman"] else "undefined (a constant column)")
    lines += ["", f"Across the {len(across['runs'])} runs that reached {sw.steps_to:.0%} "
              f"validation (every arm and seed; `runs.json`): Spearman's ρ of test accuracy with "
              f"ENSD {rho('ensd')}, with PR tuned {rho('pr_tuned')}, with PR tuned − PR loaded "
              f"{rho('pr_change')}; PR fell in {across['pr_fell']} of them."]
  with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")


def draw(rows, title: str, path: str, threshold: float) -> None:
  names = [r["arm"] for r in rows]
  panels = (("test_accuracy", "test accuracy (%)", 100),
            ("steps_to", f"fine-tuning steps to {threshold:.0%} validation (0: never)", 1),
            ("band_mass", "loaded attention: band mass", 1),
            ("pr_tuned", "PR after fine-tuning", 1), ("ensd", "ENSD(pretrained, tuned)", 1))
  fig, axes = plots.plt.subplots(1, len(panels), figsize=(3.9 * len(panels), 3.8))
  for ax, (key, label, scale) in zip(axes, panels):
    # A column no seed of the arm has (its checkpoints gone) gets no bar, and says so; an arm
    # that never reached the threshold keeps its 0.
    missing = [r[key] is None for r in rows]
    means = [0.0 if gone else scale * (r[key][0] or 0.0) for r, gone in zip(rows, missing)]
    stds = [0.0 if gone else scale * (r[key][1] or 0.0) for r, gone in zip(rows, missing)]
    ax.bar(range(len(names)), means, yerr=stds, capsize=3, alpha=0.6,
           color=["tab:blue" if n == "spt" else "tab:orange" for n in names])
    for i in (i for i, gone in enumerate(missing) if gone):
      ax.text(i, 0, "not\nmeasured", ha="center", va="bottom", fontsize=7, color="0.4")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=45, ha="right", fontsize=7)
    ax.set_title(label, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    if key == "test_accuracy":
      low = min(m - s for m, s in zip(means, stds))
      ax.set_ylim(max(0.0, low - 5), 100)
  fig.suptitle(f"{title} (seeds: {', '.join(str(r['seeds']) for r in rows)})", fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plots.plt.close(fig)


DATA_ARM = re.compile(r"^data(\d+)_(.+)$")  # a data-size arm: data<percent>_<readout arm>
OWN_READOUT = "spt"  # the arm whose readout is the model's own initialisation


def by_data_size(rows, full_rows=()) -> dict:
  """{readout arm: {percent of the training split: row}} over a `data` sweep's rows; an arm
  without the data prefix (its `spt`, and `full_rows`, the scales sweep's) is the whole split."""
  table = {}
  for row in rows:
    match = DATA_ARM.match(row["arm"])
    if match:
      table.setdefault(match[2], {})[int(match[1])] = row
  for row in list(rows) + list(full_rows):
    if row["arm"] in table:
      table[row["arm"]].setdefault(100, row)
  return table


def readout_std(arm: str, model) -> float | None:
  """The std the readout of `arm` starts from: γ_FT, or for the model's own (a linear head,
  `nn.Dense`'s LeCun normal) 1/√d_model; None where neither applies."""
  if arm.startswith("gamma_"):
    return float(arm[len("gamma_"):])
  if arm == OWN_READOUT and model.classifier == "linear":
    return float(model.d_model) ** -0.5
  return None


def draw_by_data_size(table: dict, model, title: str, path: str) -> None:
  """The readouts ordered by their starting std on a categorical axis, one line per data size."""
  stds = {arm: readout_std(arm, model) for arm in table}
  arms = sorted((a for a in table if stds[a] is not None), key=lambda a: stds[a])
  labels = [f"own\n({stds[a]:.3g})" if a == OWN_READOUT else f"γ={stds[a]:g}" for a in arms]
  sizes = sorted({p for arm in arms for p in table[arm]})
  panels = (("test_accuracy", "test accuracy (%)", 100), ("pr_tuned", "PR after fine-tuning", 1),
            ("ensd", "ENSD(pretrained, tuned)", 1))
  fig, axes = plots.plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
  for ax, (key, label, scale) in zip(axes, panels):
    for size in sizes:
      # A readout not measured at this size (its checkpoints gone) is a gap in the line, not a
      # segment drawn across it.
      values = [table[a][size].get(key) if size in table[a] else None for a in arms]
      values = np.asarray([(v[0], v[1]) if v is not None else (np.nan, np.nan) for v in values])
      ax.errorbar(range(len(arms)), scale * values[:, 0], yerr=scale * values[:, 1], marker="o",
                  capsize=3, label=f"{size}% of the training split")
    ax.set_xticks(range(len(arms)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_xlabel("readout at the hand-off (std)", fontsize=8)
    ax.set_title(label, fontsize=9)
    ax.grid(alpha=0.3)
  axes[0].legend(fontsize=7)
  fig.suptitle(f"{title}: by fine-tuning set size (mean ± std over seeds)", fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plots.plt.close(fig)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--sweep", required=True, help="configs/sweeps/init_scales.py:<task>[,data]")
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--out", required=True)
  parser.add_argument("--handoff", action="store_true",
                      help="only each arm's hand-off, made from the spt arm's (no arm run needed)")
  parser.add_argument("--full_data", default=None,
                      help="a data sweep only: the scales sweep's rows.json, for by_data_size.png")
  args = parser.parse_args(argv)
  if args.full_data and not os.path.isfile(args.full_data):
    raise SystemExit(f"--full_data={args.full_data}: no such file (the scales sweep's rows.json).")
  if args.handoff:
    rows = handoff(config_lib.load_config(args.sweep), os.path.expanduser(args.workdir), args.out,
                   args.sweep)
    print(open(os.path.join(args.out, "handoff.md")).read())
    if not rows:
      raise SystemExit(f"{args.workdir}: no finished spt run of {args.sweep} yet.")
    return
  sw = config_lib.load_config(args.sweep)
  if args.full_data and not any(DATA_ARM.match(sweep.parse_run(r)[0]) for r in sw.runs):
    raise SystemExit(f"--full_data: {args.sweep} has no data-size arms (data<percent>_<arm>).")
  rows = report(sw, os.path.expanduser(args.workdir), args.out, args.sweep)
  print(open(os.path.join(args.out, "table.md")).read())
  if not rows:
    raise SystemExit(f"{args.workdir}: no finished run of {args.sweep} yet.")
  if args.full_data:
    with open(args.full_data) as f:
      table = by_data_size(rows, json.load(f))
    path = os.path.join(args.out, "by_data_size.png")
    draw_by_data_size(table, config_lib.load_config(sw.base).model, sw.title, path)
    print(f"Wrote {path}")


if __name__ == "__main__":
  main()
