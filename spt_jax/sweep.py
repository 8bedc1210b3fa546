r"""Runs a grid of configs × seeds, skips finished runs, and writes a table and a plot.

  python -m spt_jax.sweep --config=configs/sweeps/pretrain_length.py:cpu --workdir=runs/sweep_pt
  python -m spt_jax.sweep --config=configs/sweeps/hybrid_init.py:cpu --workdir=W --processes=2

A sweep config (ml_collections) has:
  base       the run config, 'configs/x.py' or 'configs/x.py:variant'
  seeds      seeds each run is repeated with
  runs       strings 'name: key=value key=value ...' — overrides of the base config (dotted keys as on
             the command line; `config=configs/y.py:variant` replaces the base for that run).
             `{workdir}` and `{seed}` in a value are substituted, so a run can start from another
             run's phase (e.g. `finetune.init_from.source={workdir}/spt/seed_{seed}/pretrain`): the
             referenced run (same seed) must be in the sweep, and is finished first.
  metrics    dotted paths into results.json, e.g. 'finetune.test_of_best.accuracy'
  title      the table's and plot's title
  steps_to   optional validation accuracy threshold: also report fine-tune steps until it is first
             reached (0, the default: not reported)
  x_values   optional numbers, one per run: the plot is then a line over x instead of bars
  x_label    optional label of that x axis
  output     optional subdirectory of the workdir for the outputs ('' = the workdir itself), so that
             several sweeps can share one workdir and with it the runs they have in common
Any other field, or a required one missing, is an error naming the config file.
Each run lives in `<workdir>/<name>/seed_<s>`; one whose results.json holds every phase it runs is
finished and not re-run (a run killed between its phases resumes).
Its `run_spec.json` records the config and overrides it was started with: a sweep that names the
same run directory with another spec is refused (rename the run), so sharing never mixes up runs.
Out: `<workdir>/<output>/table.md`, `table.csv`, `results.json` and `plot.png`; the table adds each
arm's training compute (`train_flops`, all phases, spt_jax/flops.py) where its runs counted it.
With --processes=N > 1 the runs are N main.py processes at a time, each confined to cores of its own
(--cores; platform.core_slots: the same number for each), so that N runs on N cores do not fight
over them; --nopin_cores leaves them unconfined. A run's numbers depend on its core count at
float32 rounding (XLA:CPU splits some operations by thread count): resume a sweep with the same
--processes and placement to continue its runs bit-identically.
"""
from __future__ import annotations

import ast
import concurrent.futures
import csv
import re
import json
import os
import subprocess
import sys
import time

import numpy as np
from absl import app, flags, logging
import ml_collections
from ml_collections import config_flags

from spt_jax import config_lib, workdir_lock
from spt_jax.metric_writers import is_url, read_json, workdir_path, write_json, write_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Fields of a sweep config (see the module docstring); the optional ones default to "not asked for".
REQUIRED = ("base", "seeds", "runs", "metrics", "title")
OPTIONAL = {"steps_to": 0.0, "x_values": (), "x_label": "", "output": ""}
RUN_SPEC = "run_spec.json"
_REFERENCE = re.compile(r"\{workdir\}/([^/{}]+)/")
# Fields that must hold a non-empty sequence of this type (a bare string is a common slip).
_SEQUENCES = {"seeds": int, "runs": str, "metrics": str}


def check_sweep(sweep, source: str = "the sweep config"):
  """The sweep config with its optional fields filled in, or one line naming what is wrong."""
  fields = sweep.to_dict() if isinstance(sweep, ml_collections.ConfigDict) else dict(sweep)
  problems = []
  missing = [f for f in REQUIRED if f not in fields]
  if missing:
    problems.append(f"missing required field(s) {', '.join(map(repr, missing))}")
  unknown = sorted(set(fields) - set(REQUIRED) - set(OPTIONAL))
  if unknown:
    problems.append(f"unknown field(s) {', '.join(map(repr, unknown))}")
  for name, kind in _SEQUENCES.items():
    value = fields.get(name)
    if name in fields and (isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple))
                           or not value or not all(isinstance(v, kind) for v in value)):
      problems.append(f"{name!r} must be a non-empty list of {kind.__name__}, got {value!r}")
  if problems:
    raise ValueError(f"{source}: {'; '.join(problems)} (fields: see spt_jax/sweep.py).")
  return ml_collections.ConfigDict({**OPTIONAL, **fields})


def parse_run(spec: str) -> tuple[str, dict]:
  """'name: a.b=1 c=x' → ('name', {'a.b': 1, 'c': 'x'}); values are Python literals or strings."""
  if ":" not in spec:
    raise ValueError(f"Sweep run {spec!r} must look like 'name: key=value ...'.")
  name, rest = spec.split(":", 1)
  overrides = {}
  for item in rest.split():
    if "=" not in item:
      raise ValueError(f"Sweep run {spec!r}: {item!r} is not key=value.")
    key, value = item.split("=", 1)
    try:
      overrides[key] = ast.literal_eval(value)
    except (ValueError, SyntaxError):
      overrides[key] = value
  return name.strip(), overrides


load_config = config_lib.load_config


def apply_overrides(config, overrides: dict) -> None:
  for key, value in overrides.items():
    *parents, last = key.split(".")
    node = config
    for p in parents:
      node = node[p]
    if last not in node:
      raise KeyError(f"Sweep override {key}={value!r}: the config has no field {key!r}.")
    if isinstance(node[last], tuple) and isinstance(value, str):
      value = (value,)  # As on the command line: a bare string is a one-entry pattern list.
    node[last] = value


# The table's compute column: each arm's training FLOPs, all phases (mean ± std over seeds).
COMPUTE = "train_flops"


def _lookup(results: dict, dotted: str):
  node = results
  for part in dotted.split("."):
    if not isinstance(node, dict) or part not in node:
      return None
    node = node[part]
  return node


def steps_to(run_dir: str, threshold: float, phase: str = "finetune"):
  """First step at which validation accuracy >= threshold (None if never)."""
  path = workdir_path(run_dir) / phase / "metrics.jsonl"
  if not path.exists():
    return None
  for line in path.read_text().splitlines():
    record = json.loads(line)
    if record.get("split") == "val" and record.get("accuracy", -1) >= threshold:
      return record["step"]
  return None


def _run_in_process(overrides: dict, seed: int, run_dir: str) -> None:
  from spt_jax import experiment
  config = load_config(overrides["config"])
  apply_overrides(config, {k: v for k, v in overrides.items() if k != "config"})
  config.seed = seed
  experiment.run(config, run_dir)


def _run_subprocess(overrides: dict, seed: int, run_dir: str, cores=None) -> None:
  """main.py on the run, confined to `cores` (None: anywhere)."""
  args = [sys.executable, os.path.join(ROOT, "main.py"), f"--config={overrides['config']}",
          f"--workdir={run_dir}", f"--config.seed={seed}",
          # Several runs share the cores already: per-core devices in each would oversubscribe them.
          "--cpu_devices=1"]
  if cores:
    args.append(f"--cores={','.join(map(str, cores))}")
  for key, value in overrides.items():
    if key != "config":
      text = value if isinstance(value, str) else repr(value)
      args.append(f"--config.{key}={text}")
  workdir_path(run_dir).mkdir(parents=True, exist_ok=True)
  header = f"==== sweep attempt {time.strftime('%Y-%m-%dT%H:%M:%S%z')}: {' '.join(args)}\n"
  if not is_url(run_dir):
    # Appended, not rewritten: a resumed run's log keeps the attempts before it.
    with open(os.path.join(run_dir, "log.txt"), "a") as log:
      log.write(header)
      log.flush()
      done = subprocess.run(args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
  else:  # an object store has no append: the attempt's output joins the log once it ends
    done = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT,
                          text=True)
    log = workdir_path(run_dir) / "log.txt"
    write_text(log, (log.read_text() if log.exists() else "") + header + done.stdout)
  if done.returncode:
    raise RuntimeError(f"{run_dir} failed (exit {done.returncode}); see {run_dir}/log.txt")


def references(overrides: dict) -> set[str]:
  """Names of the runs whose directories a run's override values point into via {workdir}."""
  return {name for v in overrides.values() if isinstance(v, str) for name in _REFERENCE.findall(v)}


def finished(run_dir: str, overrides: dict) -> bool:
  """Whether the run's results.json holds all its phases (it is rewritten after each phase)."""
  path = workdir_path(run_dir) / "results.json"
  if not path.exists():
    return False
  phases = overrides.get("phases") or load_config(overrides["config"]).phases
  done = read_json(path)
  return all(p.strip() in done for p in phases.split(",") if p.strip())


def check_run_spec(run_dir: str, spec: dict) -> None:
  """Records the spec a run directory is started with; another spec there is an error."""
  path = workdir_path(run_dir) / RUN_SPEC
  spec = json.loads(json.dumps(spec))  # as it reads back: tuples (pattern overrides) become lists
  if path.exists():
    saved = read_json(path)
    if saved != spec:
      raise ValueError(f"{run_dir} holds a run started as {saved}, but this sweep names it with "
                       f"{spec}; give the run another name (nothing was changed).")
    return
  write_json(path, spec)


def _ready(pending: dict, busy, job) -> bool:
  """A job can start once no run it references (same seed) is still to run or running."""
  return not any((d, job[2]) in pending or (d, job[2]) in busy for d in job[4])


def _schedule(todo, processes: int, start: float, pin_cores: bool = True) -> list[str]:
  """Runs jobs, each once the runs it references have finished (in this process when processes is
  1, else as that many main.py processes, each confined to cores of its own when `pin_cores`:
  unconfined, every process sizes its thread pools for the whole machine and they contend);
  returns the messages of runs that did not finish."""
  from spt_jax import platform  # jax: imported once the sweep config has been checked
  pending = {(job[0], job[2]): job for job in todo}  # (name, seed) -> job
  slots = platform.core_slots(processes) if pin_cores and processes > 1 else [None] * processes
  free_slots = list(range(processes))
  failed, failures, running = set(), [], {}

  def drop(key, message):
    failures.append(message)
    failed.add(key)
    del pending[key]

  def launchable():
    for key, job in list(pending.items()):
      if any((d, job[2]) in failed for d in job[4]):
        drop(key, f"{job[3]}: not run, it starts from a run that failed")
      elif _ready(pending, [key for key, _ in running.values()], job):
        elsewhere = workdir_lock.holder(job[3])
        if elsewhere:  # another process is training it: leave it (and its log) alone
          drop(key, f"{job[3]}: not run here, another process is running it ({elsewhere}); "
                    f"re-run the sweep once it has finished")
        else:
          yield key, job

  if processes <= 1:
    while pending:
      key, (name, overrides, seed, run_dir, _) = next(launchable(), (None, (None,) * 5))
      if key is None:
        break
      logging.info("Sweep run: %s seed %d (%.0f s so far)", name, seed, time.time() - start)
      del pending[key]
      _run_in_process(overrides, seed, run_dir)
  else:
    with concurrent.futures.ThreadPoolExecutor(processes) as pool:
      while pending or running:
        for key, (name, overrides, seed, run_dir, _) in launchable():
          if len(running) >= processes:
            break
          slot = free_slots.pop(0)
          logging.info("Sweep run: %s seed %d%s (%.0f s so far)", name, seed,
                       f" on core(s) {','.join(map(str, slots[slot]))}" if slots[slot] else "",
                       time.time() - start)
          running[pool.submit(_run_subprocess, overrides, seed, run_dir, slots[slot])] = (key,
                                                                                           slot)
          del pending[key]
        if not running:
          break
        finished, _ = concurrent.futures.wait(running,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
        for future in finished:
          key, slot = running.pop(future)
          free_slots.append(slot)
          try:
            future.result()
          except Exception as e:  # noqa: BLE001 - reported with the others at the end
            failures.append(str(e))
            failed.add(key)
  failures += [f"{job[3]}: not run, its references form a cycle" for job in pending.values()]
  return failures


def run_sweep(sweep, workdir: str, processes: int = 1,
              source: str = "the sweep config", pin_cores: bool = True) -> list[dict]:
  """Runs what is not finished yet, then writes the outputs; source names the config in errors.
  With processes > 1 and `pin_cores`, each run is confined to cores of its own
  (platform.core_slots)."""
  sweep = check_sweep(sweep, source)
  runs = [parse_run(s) for s in sweep.runs]
  names = [n for n, _ in runs]
  if len(set(names)) != len(names):
    raise ValueError(f"Sweep run names must be unique: {names}")
  if sweep.x_values and len(sweep.x_values) != len(runs):
    raise ValueError(f"x_values has {len(sweep.x_values)} entries for {len(runs)} runs.")
  for name, overrides in runs:
    missing = sorted(references(overrides) - set(names))
    if missing:
      raise ValueError(f"{source}: run {name!r} starts from run {missing[0]!r}, which the sweep "
                       f"does not list; add it to runs.")
  def substitute(overrides, seed):
    return {k: v.format(workdir=os.fspath(workdir_path(workdir)), seed=seed)
            if isinstance(v, str) else v for k, v in overrides.items()}
  jobs = []
  for name, ov in runs:
    for seed in sweep.seeds:
      overrides = substitute(ov, seed)
      overrides.setdefault("config", sweep.base)
      jobs.append((name, overrides, seed, os.path.join(workdir, name, f"seed_{seed}"),
                   references(ov)))
  for name, overrides, seed, run_dir, _ in jobs:  # Before anything runs: a clash stops the sweep.
    if (workdir_path(run_dir) / RUN_SPEC).exists():
      check_run_spec(run_dir, {"overrides": overrides, "seed": seed})
  todo = [j for j in jobs if not finished(j[3], j[1])]
  logging.info("Sweep: %d runs, %d finished, %d to go.", len(jobs), len(jobs) - len(todo), len(todo))
  for _, overrides, seed, run_dir, _ in todo:
    check_run_spec(run_dir, {"overrides": overrides, "seed": seed})
  failures = _schedule(todo, processes, time.time(), pin_cores)
  if failures:
    raise RuntimeError(f"{len(failures)} sweep run(s) did not finish:\n  " + "\n  ".join(failures))
  rows = summarise(sweep, runs, workdir)
  write_outputs(sweep, rows, os.path.join(workdir, sweep.output))
  if is_url(workdir):  # the report module reads local files
    logging.info("Sweep curves are not drawn for a URL workdir; `python scripts/sweep_curves.py` "
                 "draws them from a local copy.")
    return rows
  try:  # curves.png next to plot.png: every arm's learning curves, mean ± std over the seeds.
    from spt_jax.analysis import report
    report.sweep_curves(workdir, names, sweep.seeds,
                        os.path.join(workdir, sweep.output, report.SWEEP_FIGURE), sweep.title)
  except Exception as e:  # noqa: BLE001 - the table and plot stand without it
    logging.warning("Sweep curves not drawn (%s: %s).", type(e).__name__, e)
  return rows


def summarise(sweep, runs, workdir: str) -> list[dict]:
  rows = []
  for i, (name, _) in enumerate(runs):
    per_seed = []
    for seed in sweep.seeds:
      run_dir = os.path.join(workdir, name, f"seed_{seed}")
      results = read_json(workdir_path(run_dir) / "results.json")
      values = {m: _lookup(results, m) for m in sweep.metrics}
      if sweep.steps_to > 0:
        values["steps_to_val"] = steps_to(run_dir, sweep.steps_to)
      values[COMPUTE] = total_flops(results)
      per_seed.append(values)
    row = {"run": name, "seeds": len(per_seed)}
    if sweep.x_values:
      row["x"] = sweep.x_values[i]
    for key in per_seed[0]:
      vals = [v[key] for v in per_seed]
      reached = [v for v in vals if v is not None]
      row[f"{key}_mean"] = float(np.mean(reached)) if reached else None
      row[f"{key}_std"] = float(np.std(reached)) if reached else None
      if key == "steps_to_val":
        row["steps_to_val_reached"] = f"{len(reached)}/{len(vals)}"
    rows.append(row)
  return rows


def total_flops(results: dict):
  """A run's training compute: the FLOPs of all its phases (spt_jax/flops.py), None if a phase
  has no count (a run from before compute was counted)."""
  counts = [r.get("train_flops") if isinstance(r, dict) else None for r in results.values()]
  return float(sum(counts)) if counts and None not in counts else None


def _fmt(mean, std):
  return "—" if mean is None else f"{mean:.4g} ± {std:.2g}"


def write_outputs(sweep, rows: list[dict], workdir: str) -> None:
  """table.md, table.csv, results.json and plot.png into `workdir` (local, or a URL: drawn in a
  temporary local directory, then copied there)."""
  if is_url(workdir):
    import tempfile
    with tempfile.TemporaryDirectory(prefix="spt_jax_sweep_") as local:
      write_outputs(sweep, rows, local)
      for name in sorted(os.listdir(local)):
        (workdir_path(workdir) / name).write_bytes(open(os.path.join(local, name), "rb").read())
    return
  os.makedirs(workdir, exist_ok=True)
  keys = list(sweep.metrics) + (["steps_to_val"] if sweep.steps_to > 0 else [])
  if any(r.get(f"{COMPUTE}_mean") is not None for r in rows):
    keys.append(COMPUTE)
  header = ["run"] + (["x"] if sweep.x_values else []) + keys
  lines = [f"## {sweep.title}", "", f"base: `{sweep.base}`, seeds: {list(sweep.seeds)}" + (
      f"; steps_to_val = first fine-tune step with validation accuracy >= {sweep.steps_to} "
      f"(mean over the seeds that reached it)" if sweep.steps_to > 0 else ""), "",
           "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for r in rows:
    cells = [r["run"]] + ([str(r["x"])] if sweep.x_values else [])
    for k in keys:
      cell = _fmt(r[f"{k}_mean"], r[f"{k}_std"])
      if k == "steps_to_val":
        cell += f" ({r['steps_to_val_reached']})"
      cells.append(cell)
    lines.append("| " + " | ".join(cells) + " |")
  with open(os.path.join(workdir, "table.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  with open(os.path.join(workdir, "table.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  with open(os.path.join(workdir, "results.json"), "w") as f:
    json.dump(rows, f, indent=2)
  from spt_jax.analysis import plots
  main_metric = sweep.metrics[0]
  means = np.array([r[f"{main_metric}_mean"] for r in rows], float)
  stds = np.array([r[f"{main_metric}_std"] for r in rows], float)
  if sweep.x_values:
    plots.lines(list(sweep.x_values), {main_metric: (means, stds)},
                os.path.join(workdir, "plot.png"), xlabel=sweep.x_label, ylabel=main_metric,
                title=sweep.title, logx=True)
  else:
    plots.bars([r["run"] for r in rows], means, stds, os.path.join(workdir, "plot.png"),
               ylabel=main_metric, title=sweep.title)


def main(argv):
  del argv
  source = config_flags.get_config_filename(flags.FLAGS["config"])
  sweep = check_sweep(flags.FLAGS.config, source)  # Before the slow imports below.
  from spt_jax import experiment, platform
  # As main.py's defaults (one device, the retained heap): in-process runs train here.
  platform.configure_process(None, cpu_devices=1, retain_freed_memory=True)
  experiment.quiet_orbax_logging()
  rows = run_sweep(sweep, flags.FLAGS.workdir, flags.FLAGS.processes, source,
                   pin_cores=flags.FLAGS.pin_cores)
  print((workdir_path(flags.FLAGS.workdir) / sweep.output / "table.md").read_text())
  del rows


def _define_flags():
  # Defined only when run as a program, so importing the library never claims global flag names.
  config_flags.DEFINE_config_file("config", None, "Sweep config file, optionally with ':variant'.",
                                  lock_config=True)
  flags.DEFINE_string("workdir", None, "Directory of the sweep's runs and outputs.")
  flags.DEFINE_integer("processes", 1, "Runs executed at once (separate main.py processes if > 1).")
  flags.DEFINE_bool("pin_cores", True, "With --processes > 1: confine each run to cores of its own "
                    "(main.py --cores), the same number for each, so that concurrent runs do not "
                    "oversubscribe them. The core count per run changes float32 rounding: resume "
                    "a sweep with the same --processes and --pin_cores on the same machine kind.")
  flags.mark_flags_as_required(["config", "workdir"])


if __name__ == "__main__":
  _define_flags()
  app.run(main)
