r"""A report per run, from `metrics.jsonl` alone: learning curves as a PNG and a markdown summary.

  python -m spt_jax.report WORKDIR          # every phase of a run (or one phase directory)

For each phase directory (one holding metrics.jsonl) it writes next to the phase's results.json:

  <phase>/report.png   training and validation loss, and the phase's selection metric (accuracy,
                       for SPT the masked-token accuracy, R² for masked pixels under L1) against
                       the step; the best checkpoint marked, with the test score of it
  <phase>/report.md    status, the best / final validation and test records, throughput, and for
                       masked pretraining the reference levels if computed (reference_levels.json)

and WORKDIR/report.md gathers the phases' summaries. Nothing else is read (no checkpoint, config or
results.json), so a killed, resumed or copied run reports the same: the best step is the step of
the test record, which the trainer writes for the checkpoint it selected; a phase without one yet
(killed, still running) marks the highest validation value of its selection metric so far.

`sweep_curves` draws a sweep's arms overlaid: the same curves, mean and ± one standard deviation
over the seeds (spt_jax/sweep.py writes it as curves.png next to its plot.png).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys

import numpy as np

from spt_jax.analysis import reference_levels

METRICS = "metrics.jsonl"
FIGURE = "report.png"
SUMMARY = "report.md"
SWEEP_FIGURE = "curves.png"
LINE_STYLES = ("-", "--", ":", "-.")
LEVELS = reference_levels.LEVELS_FILE
# Columns of the summary tables, in this order when present, then the rest alphabetically.
_FIRST = ("loss", "accuracy", "r2")
# Training-only bookkeeping, not drawn or tabulated as results.
_BOOKKEEPING = ("learning_rate", "steps_per_sec", "grad_norm", "mask_rate")


def read_metrics(path: str) -> list[dict]:
  """The records of a metrics.jsonl. A last line cut short by a kill is ignored (the resumed run
  rewrites it, as MetricWriter does); a damaged line before it is an error naming path:line."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path}: no such file (a phase directory holds metrics.jsonl).")
  with open(path) as f:
    lines = [(n, line) for n, line in enumerate(f, start=1) if line.strip()]
  records = []
  for i, (lineno, line) in enumerate(lines):
    try:
      record = json.loads(line)
    except json.JSONDecodeError:
      if i == len(lines) - 1:
        break
      raise ValueError(f"{path}:{lineno}: not a JSON record.") from None
    if not isinstance(record, dict) or "step" not in record or "split" not in record:
      raise ValueError(f"{path}:{lineno}: not a metrics record (needs 'step' and 'split').")
    # Non-finite values are written as strings ("nan", "inf").
    records.append({k: (float(v) if isinstance(v, str) and k not in ("split",) else v)
                    for k, v in record.items()})
  return records


def curve(records, split: str, metric: str) -> dict[int, float]:
  """{step: value} of `metric` in the records of `split` (a resumed run's last record per step)."""
  return {r["step"]: float(r[metric]) for r in records if r["split"] == split and metric in r}


def selection_metric(records) -> str:
  """The validation metric the trainer selects on, as the records show it: R² for pixels under L1,
  else accuracy, else a composite phase's first head accuracy (objectives' order)."""
  keys = {k for r in records if r["split"] == "val" for k in r}
  for key in ("r2", "accuracy", "mlm_accuracy", "span_accuracy", "contrastive_accuracy",
              "random_accuracy"):
    if key in keys:
      return key
  found = sorted(k for k in keys if k.endswith("accuracy"))
  return found[0] if found else "loss"


@dataclasses.dataclass
class Phase:
  """What a phase's metrics say: its curves, the selected (best) step and its test record."""
  name: str
  directory: str
  records: list
  metric: str
  objective: str  # config.<phase>.objective (from the phase's config.json), or inferred
  best_step: int | None
  best_from_test: bool  # the best step is the test record's (the trainer's selection)
  test: dict | None
  last_step: int

  def val(self, metric: str) -> dict[int, float]:
    return curve(self.records, "val", metric)

  def train(self, metric: str) -> dict[int, float]:
    return curve(self.records, "train", metric)

  @property
  def masked(self) -> bool:
    return self.objective == "mlm"

  @property
  def metric_label(self) -> str:
    if self.metric == "r2":
      return "masked-pixel R²" if self.masked else "R²"
    if self.metric == "accuracy" and self.masked:
      return "masked-token accuracy"
    return self.metric.replace("_", " ")


def read_phase(directory: str) -> Phase:
  records = read_metrics(os.path.join(directory, METRICS))
  if not records:
    raise ValueError(f"{os.path.join(directory, METRICS)}: no records yet.")
  metric = selection_metric(records)
  tests = [r for r in records if r["split"] == "test"]
  test = tests[-1] if tests else None
  val = curve(records, "val", metric)
  if test is not None:
    best_step, from_test = test["step"], True
  elif val:
    # The trainer keeps the first step of the highest value (a later equal one is not better).
    best_step, from_test = max(val, key=lambda s: (val[s], -s)), False
  else:
    best_step, from_test = None, False
  last = max((r["step"] for r in records if r["split"] in ("train", "val")), default=0)
  name = os.path.basename(os.path.normpath(directory))
  return Phase(name, directory, records, metric, phase_objective(directory, name, records),
               best_step, from_test, test, last)


def phase_objective(directory: str, name: str, records) -> str:
  """The phase's objective from the config.json the trainer writes when the phase starts (so a
  killed run has it too); without one (metrics.jsonl copied alone), what the records show: masked
  prediction logs its mask rate."""
  try:
    with open(os.path.join(directory, "config.json")) as f:
      return json.load(f)[name]["objective"]
  except (OSError, ValueError, KeyError, TypeError):
    return "mlm" if any("mask_rate" in r for r in records if r["split"] == "train") else ""


# ------------------------------------------------------------------------------------- drawing
def _xy(points: dict[int, float]):
  steps = sorted(points)
  return np.array(steps), np.array([points[s] for s in steps], float)


def _panel(ax, phase: Phase, metric: str, ylabel: str) -> None:
  train, val = phase.train(metric), phase.val(metric)
  if train:
    ax.plot(*_xy(train), color="tab:blue", lw=1.0, alpha=0.75, label="training")
  if val:
    ax.plot(*_xy(val), color="tab:orange", lw=1.4, marker="o", ms=3, label="validation")
  if phase.best_step is not None:
    ax.axvline(phase.best_step, color="0.35", ls="--", lw=1.0,
               label=f"best checkpoint (step {phase.best_step:,})")
    if phase.best_step in val:
      ax.plot([phase.best_step], [val[phase.best_step]], marker="*", ms=11, color="tab:orange",
              mec="black", mew=0.6, ls="none")
    if phase.test is not None and metric in phase.test:
      ax.plot([phase.best_step], [float(phase.test[metric])], marker="D", ms=6, color="tab:red",
              ls="none", label=f"test of best: {float(phase.test[metric]):.4g}")
  _axes_finish(ax, ylabel)


def step_label(step: float, _position=None) -> str:
  """A step-axis tick: '750', '1.5k', '12k', so that five-digit steps do not run together."""
  return f"{step / 1000:g}k" if abs(step) >= 1000 else f"{step:g}"


def _axes_finish(ax, ylabel: str) -> None:
  from matplotlib.ticker import FuncFormatter, MaxNLocator
  ax.xaxis.set_major_locator(MaxNLocator(nbins=7, integer=True))
  ax.xaxis.set_major_formatter(FuncFormatter(step_label))
  ax.set_xlabel("step")
  ax.set_ylabel(ylabel)
  ax.grid(alpha=0.3)
  if ax.get_legend_handles_labels()[0]:
    ax.legend(fontsize=8, loc="best", framealpha=0.85)


PHASE_KINDS = {"mlm": "masked-prediction pretraining", "clm": "causal-LM pretraining",
               "composite": "composite pretraining", "classification": "supervised training"}


def phase_title(phase: Phase, run: str) -> str:
  kind = PHASE_KINDS.get(phase.objective, phase.objective or "training")
  status = ("finished" if phase.test is not None else
            f"no test record yet (stopped or running at step {phase.last_step:,})")
  return f"{run} / {phase.name}: {kind}, {status}"


def draw_phase(phase: Phase, path: str, run: str) -> None:
  from spt_jax.analysis import plots  # matplotlib (Agg), loaded by runs that draw only
  fig, axes = plots.plt.subplots(1, 2, figsize=(10.5, 3.9))
  _panel(axes[0], phase, "loss", "loss")
  _panel(axes[1], phase, phase.metric, phase.metric_label)
  axes[0].set_title("loss", fontsize=10)
  axes[1].set_title(phase.metric_label, fontsize=10)
  fig.suptitle(phase_title(phase, run), fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plots.plt.close(fig)


# ------------------------------------------------------------------------------------- summary
def _fmt(value) -> str:
  if isinstance(value, float):
    return "nan" if math.isnan(value) else f"{value:.4g}"
  return str(value)


def _columns(rows) -> list[str]:
  keys = {k for r in rows for k in r if k not in ("step", "split") + _BOOKKEEPING}
  return [k for k in _FIRST if k in keys] + sorted(keys - set(_FIRST))


def summary(phase: Phase, run: str, figure: str | None = FIGURE) -> str:
  val = [r for r in phase.records if r["split"] == "val"]
  train = [r for r in phase.records if r["split"] == "train"]
  best = next((r for r in val if r["step"] == phase.best_step), None)
  rows = [("best validation" + ("" if phase.best_from_test else " so far"), best),
          ("final validation", val[-1] if val else None), ("test of best", phase.test)]
  rows = [(label, r) for label, r in rows if r is not None]
  lines = [f"## {run} / {phase.name}", ""]
  if phase.test is not None:
    lines.append(f"Finished: {phase.last_step:,} steps; the checkpoint selected on validation "
                 f"{phase.metric_label} is step {phase.best_step:,}, and its test record is "
                 f"below.")
  else:
    lines.append(f"No test record: stopped or still running at step {phase.last_step:,}"
                 + (f"; the best validation {phase.metric_label} so far is at step "
                    f"{phase.best_step:,}." if phase.best_step is not None else "."))
  if rows:
    columns = _columns([r for _, r in rows])
    lines += ["", "| | step | " + " | ".join(columns) + " |",
              "|---|---:|" + "---:|" * len(columns)]
    for label, r in rows:
      lines.append(f"| {label} | {r['step']:,} | "
                   + " | ".join(_fmt(r.get(c, "")) for c in columns) + " |")
  if train:
    rates = [r["steps_per_sec"] for r in train if "steps_per_sec" in r]
    lines += ["", f"Training: last record at step {train[-1]['step']:,}, loss "
                  f"{_fmt(train[-1].get('loss', float('nan')))}"
                  + (f"; median {np.median(rates):.3g} steps/s over {len(rates)} windows"
                     if rates else "") + "."]
  levels_path = os.path.join(phase.directory, LEVELS)
  if os.path.isfile(levels_path):  # masked pretraining: where the run stands (reference_levels.py)
    with open(levels_path) as f:
      levels = json.load(f)
    lines += ["", "Where this pretraining stands, on its own validation masks "
                  "(`python -m spt_jax.analysis.reference_levels`):", "",
              reference_levels.table(levels, best.get("loss") if best else None,
                                     best.get("accuracy") if best else None).rstrip()]
  if figure:
    lines += ["", f"![{run} / {phase.name} learning curves]({figure})"]
  return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------- run level
def phase_dirs(workdir: str) -> list[str]:
  """The phase directories of a run (those holding metrics.jsonl), or workdir if it is one."""
  if os.path.isfile(os.path.join(workdir, METRICS)):
    return [workdir]
  found = [os.path.join(workdir, d) for d in sorted(os.listdir(workdir))
           if os.path.isfile(os.path.join(workdir, d, METRICS))]
  # In the order they run: pretraining first, then fine-tuning, then any other, by name.
  rank = {"pretrain": 0, "finetune": 1}
  return sorted(found, key=lambda d: (rank.get(os.path.basename(d), 2), os.path.basename(d)))


def run_label(workdir: str) -> str:
  """A run's name in titles: its directory, with the arm for a sweep's `<arm>/seed_<s>`."""
  workdir = os.path.abspath(workdir)
  name = os.path.basename(workdir)
  return f"{os.path.basename(os.path.dirname(workdir))}/{name}" if name.startswith("seed_") else name


def write_phase_report(directory: str, run: str | None = None) -> tuple[str, str]:
  """report.png and report.md in one phase directory; returns their paths."""
  directory = os.path.abspath(directory)
  run = run or run_label(os.path.dirname(directory))
  phase = read_phase(directory)
  figure, text = os.path.join(directory, FIGURE), os.path.join(directory, SUMMARY)
  draw_phase(phase, figure, run)
  with open(text, "w") as f:
    f.write(summary(phase, run))
  return figure, text


def write_run_summary(workdir: str) -> str:
  """WORKDIR/report.md: every phase's summary, its figure linked by relative path."""
  workdir = os.path.abspath(workdir)
  run = run_label(workdir)
  sections = [f"# {run}", ""]
  for directory in phase_dirs(workdir):
    phase = read_phase(directory)
    sections.append(summary(phase, run, figure=os.path.join(phase.name, FIGURE)))
  path = os.path.join(workdir, SUMMARY)
  with open(path, "w") as f:
    f.write("\n".join(sections))
  return path


def write_reports(workdir: str, phase: str | None = None) -> list[str]:
  """Reports of every phase of a run (or only `phase`) and the run's report.md; the paths written.
  A phase directory as workdir gets its own report only."""
  workdir = os.path.abspath(workdir)
  if os.path.isfile(os.path.join(workdir, METRICS)):
    return list(write_phase_report(workdir))
  directories = ([os.path.join(workdir, phase)] if phase else phase_dirs(workdir))
  if not directories:
    raise FileNotFoundError(f"{workdir}: no phase directory with {METRICS} (pass a run's workdir "
                            f"or one of its phase directories).")
  written = []
  for directory in directories:
    written += write_phase_report(directory, run_label(workdir))
  written.append(write_run_summary(workdir))
  return written


# --------------------------------------------------------------------------------------- sweeps
def seed_band(curves: list[dict[int, float]]):
  """(steps, mean, std) over the steps every curve has (seeds of one arm)."""
  if not curves:
    return np.array([], int), np.array([]), np.array([])
  steps = sorted(set.intersection(*(set(c) for c in curves)))
  values = np.array([[c[s] for s in steps] for c in curves], float).reshape(len(curves), -1)
  return np.array(steps), values.mean(axis=0), values.std(axis=0)


def sweep_curves(workdir: str, runs: list[str], seeds, path: str, title: str = "") -> str:
  """A sweep's arms overlaid: per phase, training loss, validation loss and the validation
  selection metric against the step, mean ± std over the seeds (`<workdir>/<run>/seed_<s>`)."""
  from spt_jax.analysis import plots
  fig = sweep_figure(workdir, runs, seeds, title)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=100)
  plots.plt.close(fig)
  return path


def sweep_figure(workdir: str, runs: list[str], seeds, title: str = ""):
  """The matplotlib figure of `sweep_curves` (rows: phases; columns: training loss, validation
  loss, validation selection metric; one line and ± std band per arm)."""
  from spt_jax.analysis import plots
  arms = {}  # run -> {phase: [Phase per seed]}
  order = []
  for run in runs:
    per_phase = {}
    for seed in seeds:
      run_dir = os.path.join(workdir, run, f"seed_{seed}")
      for directory in phase_dirs(run_dir) if os.path.isdir(run_dir) else []:
        phase = read_phase(directory)
        per_phase.setdefault(phase.name, []).append(phase)
        if phase.name not in order:
          order.append(phase.name)
    arms[run] = per_phase
  if not order:
    raise FileNotFoundError(f"{workdir}: no run of {runs} has a phase with {METRICS}.")
  columns = (("train", "loss", "training loss"), ("val", "loss", "validation loss"),
             ("val", None, "validation"))
  # One legend for the whole figure, below it: an arm has one colour in every panel, and a
  # legend of many arms drawn inside each panel would hide the curves.
  legend_rows = -(-len(runs) // 4)
  legend_height = 0.25 * legend_rows + 0.15
  height = 3.3 * len(order) + legend_height
  fig, axes = plots.plt.subplots(len(order), 3, figsize=(13.5, height), squeeze=False)
  colors = plots.plt.rcParams["axes.prop_cycle"].by_key()["color"]
  for row, name in enumerate(order):
    for col, (split, metric, label) in enumerate(columns):
      ax = axes[row][col]
      ylabel = label
      for i, run in enumerate(runs):
        phases = arms[run].get(name, [])
        if not phases:
          continue
        m = metric or phases[0].metric
        if metric is None:
          ylabel = f"validation {phases[0].metric_label}"
        steps, mean, std = seed_band([curve(p.records, split, m) for p in phases])
        if not len(steps):
          continue
        # Past the colour cycle an arm would share a colour: the line style tells them apart
        # (without markers, which would hide the dashes).
        cycle = i // len(colors)
        color, style = colors[i % len(colors)], LINE_STYLES[cycle % len(LINE_STYLES)]
        marker = "o" if split == "val" and cycle == 0 else None
        ax.plot(steps, mean, color=color, ls=style, lw=1.3 if cycle == 0 else 1.8, marker=marker,
                ms=2.5, label=f"{run} ({len(phases)} seed{'s' if len(phases) > 1 else ''})")
        ax.fill_between(steps, mean - std, mean + std, color=color, alpha=0.2, lw=0)
      ax.set_title(f"{name}: {ylabel}", fontsize=10)
      _axes_finish(ax, ylabel)
  handles = {}
  for ax in fig.axes:
    for handle, label in zip(*ax.get_legend_handles_labels()):
      handles.setdefault(label, handle)
    if ax.get_legend() is not None:
      ax.get_legend().remove()
  fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(len(handles), 4),
             fontsize=9, frameon=False)
  fig.suptitle((f"{title}: " if title else "") + "mean (line) ± std (band) over seeds",
               fontsize=11)
  fig.tight_layout(rect=(0, legend_height / height, 1, 1))
  return fig


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m spt_jax.report",
                                   description=__doc__.splitlines()[0])
  parser.add_argument("workdir", help="a run's workdir, or one of its phase directories")
  args = parser.parse_args(argv)
  try:
    written = write_reports(args.workdir)
  except (FileNotFoundError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  for path in written:
    print(f"wrote {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
