r"""Runs a grid of configs × seeds, skips finished runs, and writes a table and a plot.

  python -m spt_jax.sweep --config=configs/sweeps/pretrain_length.py:cpu --workdir=runs/sweep_pt
  python -m spt_jax.sweep --config=configs/sweeps/hybrid_init.py:cpu --workdir=W --processes=2
  python -m spt_jax.sweep --config=configs/sweeps/hybrid_init.py --workdir=W --backend=slurm

A sweep config (ml_collections) has:
  base       the run config, 'configs/x.py' or 'configs/x.py:variant'
  seeds      seeds each run is repeated with
  run_seeds  optional {run name: seeds}: those runs only at those of `seeds` listed here (none: not
             run, not in the table), e.g. a re-run without a stopping rule of just the seeds that
             the rule stopped early
  runs       strings 'name: key=value key=value ...' — overrides of the base config (dotted keys as on
             the command line; `config=configs/y.py:variant` replaces the base for that run).
             `{workdir}` and `{seed}` in a value are substituted, so a run can start from another
             run's phase (e.g. `finetune.init_from.source={workdir}/spt/seed_{seed}/pretrain`): the
             referenced run (same seed) is in the sweep, and is finished first, or is not in it and
             has finished in the workdir at every seed (a stage of a larger sweep run on its own).
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
over them; --nopin_cores leaves them unconfined. A run's numbers depend on XLA:CPU's thread count
at float32 rounding (it splits some operations by it), not on the cores: by default
(--run_threads=all) each confined run keeps as many threads as an unconfined one, so a sweep's
runs are bit-identical whatever --processes and placement ran or resumed them; --run_threads=slot
gives each run one thread per core of its own, faster, bit-identical only to runs with as many.
With --backend=slurm each run is a SLURM job instead, submitted through submitit (`pip install -e
'.[slurm]'`) once the runs it starts from have finished; a job that fails is resubmitted and its run
resumes from its latest checkpoint, and one that reaches its time limit saves there and is requeued
(docs/launch.md, "Sweeps on SLURM").
"""
from __future__ import annotations

import ast
import concurrent.futures
import contextlib
import csv
import dataclasses
import functools
import itertools
import re
import json
import os
import signal
import subprocess
import sys
import time
from typing import NamedTuple

import numpy as np
from absl import app, flags, logging
import ml_collections
from ml_collections import config_flags

from spt_jax import config_lib, workdir_lock
from spt_jax.metric_writers import is_url, read_json, workdir_path, write_json, write_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Fields of a sweep config (see the module docstring); the optional ones default to "not asked for".
REQUIRED = ("base", "seeds", "runs", "metrics", "title")
OPTIONAL = {"steps_to": 0.0, "x_values": (), "x_label": "", "output": "", "run_seeds": {}}
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
  run_seeds = fields.get("run_seeds") or {}
  if isinstance(run_seeds, ml_collections.ConfigDict):
    run_seeds = run_seeds.to_dict()
  if not isinstance(run_seeds, dict):
    problems.append(f"'run_seeds' must map run names to seeds, got {run_seeds!r}")
  else:
    names = {s.split(":", 1)[0].strip() for s in fields.get("runs") or () if isinstance(s, str)}
    for name, seeds in run_seeds.items():
      if name not in names:
        problems.append(f"'run_seeds' names run {name!r}, which 'runs' does not list")
      elif (isinstance(seeds, (str, bytes)) or not isinstance(seeds, (list, tuple)) or not seeds
            or not all(isinstance(seed, int) for seed in seeds)):
        problems.append(f"'run_seeds' of {name!r} must be a non-empty list of int, got {seeds!r}")
  if problems:
    raise ValueError(f"{source}: {'; '.join(problems)} (fields: see spt_jax/sweep.py).")
  return ml_collections.ConfigDict({**OPTIONAL, **fields, "run_seeds": {
      name: tuple(seeds) for name, seeds in run_seeds.items()}})


def seeds_of(sweep, name: str) -> tuple[int, ...]:
  """The seeds a sweep runs `name` at: those of the sweep's seeds that its `run_seeds` entry
  lists, so that a sweep narrowed to fewer seeds (`--config.seeds`) narrows these too."""
  only = sweep.run_seeds.get(name)
  return tuple(s for s in sweep.seeds if only is None or s in only)


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
    overrides[key] = _literal(value)
  return name.strip(), overrides


def _literal(text: str):
  """A Python literal's value, or the text itself."""
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


load_config = config_lib.load_config


def apply_overrides(config, overrides: dict) -> None:
  for key, value in overrides.items():
    *parents, last = key.split(".")
    node = config
    for p in parents:
      node = node[p]
    if last not in node:
      raise KeyError(f"Sweep override {key}={value!r}: the config has no field {key!r}.")
    if isinstance(node[last], (tuple, list)) and isinstance(value, str):
      # As on the command line: a bare string is a one-entry pattern list (a list where the config
      # was read back from JSON).
      value = type(node[last])((value,))
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


# The XLA:CPU thread pool of a run confined to its cores (main.py --cpu_threads). Float32 results
# depend on the pool's size, not on the cores (platform.set_cpu_threads).
RUN_THREADS = {
    "all": "as many threads as the cores this sweep may use, as an unconfined run has, taking "
           "turns on the run's own cores: every run is bit-identical to the same run unconfined, "
           "alone, or resumed with any --processes (the default).",
    "slot": "one thread per core of the run's slot: faster, the more so the more slots the "
            "machine has (benchmarks/README.md), but a run is bit-identical only to runs with as "
            "many cores; resume a sweep with the same --processes.",
}


def _run_in_process(overrides: dict, seed: int, run_dir: str) -> None:
  from spt_jax import experiment
  config = load_config(overrides["config"])
  apply_overrides(config, {k: v for k, v in overrides.items() if k != "config"})
  config.seed = seed
  experiment.run(config, run_dir)


def main_py_args(overrides: dict, seed: int, run_dir: str, cores=None,
                 threads: int = 0) -> list[str]:
  """The main.py command line of one run of the sweep, confined to `cores` (None: anywhere), with
  an XLA:CPU pool of `threads` threads (0: one per core it runs on)."""
  args = [sys.executable, os.path.join(ROOT, "main.py"), f"--config={overrides['config']}",
          f"--workdir={run_dir}", f"--config.seed={seed}",
          # Several runs share the cores already: per-core devices or processes in each would
          # oversubscribe them; a run is one process on its cores.
          "--cpu_devices=1", "--cpu_processes=1"]
  if cores:
    args.append(f"--cores={','.join(map(str, cores))}")
  if threads:
    args.append(f"--cpu_threads={threads}")
  for key, value in overrides.items():
    if key != "config":
      text = value if isinstance(value, str) else repr(value)
      args.append(f"--config.{key}={text}")
  return args


def _run_subprocess(overrides: dict, seed: int, run_dir: str, cores=None, on_start=None,
                    ignored_signals=(), threads: int = 0) -> None:
  """main.py on the run, confined to `cores` (None: anywhere) with `threads` XLA threads (0: one
  per core), its output appended to the run's log.txt; `on_start(process)` is handed the process
  once it runs, which ignores `ignored_signals`."""
  args = main_py_args(overrides, seed, run_dir, cores, threads)
  workdir_path(run_dir).mkdir(parents=True, exist_ok=True)
  header = f"==== sweep attempt {time.strftime('%Y-%m-%dT%H:%M:%S%z')}: {' '.join(args)}\n"
  run = functools.partial(_main_py, args, on_start, ignored_signals)
  if not is_url(run_dir):
    # Appended, not rewritten: a resumed run's log keeps the attempts before it.
    with open(os.path.join(run_dir, "log.txt"), "a") as log:
      log.write(header)
      log.flush()
      returncode, _ = run(stdout=log)
  else:  # an object store has no append: the attempt's output joins the log once it ends
    returncode, output = run(stdout=subprocess.PIPE, text=True)
    log = workdir_path(run_dir) / "log.txt"
    write_text(log, (log.read_text() if log.exists() else "") + header + output)
  if returncode:
    raise RuntimeError(f"{run_dir} failed (exit {returncode}); see {run_dir}/log.txt")


def _main_py(args, on_start, ignored_signals, **popen) -> tuple[int, str | None]:
  """Runs main.py to its end: (exit status, its output when stdout is a pipe). As subprocess.run,
  an exception while it runs kills it, so that no run trains on unwatched."""
  with _ignoring(ignored_signals):
    process = subprocess.Popen(args, stderr=subprocess.STDOUT, cwd=ROOT, **popen)
  with process:
    try:
      if on_start is not None:
        on_start(process)
      output, _ = process.communicate()
    except BaseException:
      process.kill()
      raise
  return process.returncode, output


@contextlib.contextmanager
def _ignoring(signals):
  """Ignores `signals` while a child process starts: it keeps them ignored through exec, and this
  process gets its own handlers back (no preexec_fn, which is unsafe in a threaded process)."""
  handlers = {number: signal.signal(number, signal.SIG_IGN) for number in signals}
  try:
    yield
  finally:
    for number, handler in handlers.items():
      signal.signal(number, handler)


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


def _finished_elsewhere(run_dir: str) -> bool:
  """Whether a run directory holds a run finished under the spec it was started with."""
  spec = workdir_path(run_dir) / RUN_SPEC
  return spec.exists() and finished(run_dir, read_json(spec)["overrides"])


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


class Run(NamedTuple):
  """One run of the sweep: an arm's overrides at one seed, in its own directory."""
  name: str
  overrides: dict
  seed: int
  run_dir: str
  starts_from: set  # names of the runs (same seed) whose directories its overrides point into

  @property
  def key(self) -> tuple[str, int]:
    return self.name, self.seed


class RunQueue:
  """The runs still to start, handed out in dependency order to whichever backend runs them: a run
  once every run it starts from has finished, none whose source failed."""

  def __init__(self, todo):
    self.pending = {run.key: run for run in todo}
    self.running, self.failed, self.failures = set(), set(), []

  def startable(self):
    """Yields each run that can start now, moved from pending to running as it is yielded."""
    for key, run in list(self.pending.items()):
      sources = {(name, run.seed) for name in run.starts_from}
      if sources & self.failed:
        self._give_up(run, "not run, it starts from a run that failed")
      elif not sources & (self.pending.keys() | self.running):
        elsewhere = workdir_lock.holder(run.run_dir)
        if elsewhere:  # another process is training it: leave it (and its log) alone
          self._give_up(run, f"not run here, another process is running it ({elsewhere}); "
                             f"re-run the sweep once it has finished")
        else:
          del self.pending[key]
          self.running.add(key)
          yield run

  def finish(self, run: Run, error=None) -> None:
    self.running.discard(run.key)
    if error is not None:
      self.failures.append(str(error))
      self.failed.add(run.key)

  def unfinished(self) -> list[str]:
    """The messages of the runs that did not finish, those never started included."""
    return self.failures + [f"{run.run_dir}: not run, its references form a cycle"
                            for run in self.pending.values()]

  def _give_up(self, run: Run, why: str) -> None:
    self.failures.append(f"{run.run_dir}: {why}")
    self.failed.add(run.key)
    del self.pending[run.key]


def _schedule(todo, processes: int, start: float, pin_cores: bool = True,
              slurm: Slurm | None = None, run_threads: str = "all") -> list[str]:
  """Runs `todo`, each run once the runs it starts from have finished, on the one backend asked
  for: a SLURM job per run (`slurm`), else this process (processes 1) or that many main.py
  processes; returns the messages of runs that did not finish."""
  queue = RunQueue(todo)
  if slurm is not None:
    _run_as_slurm_jobs(queue, slurm, start)
  elif processes <= 1:
    _run_here(queue, start)
  else:
    _run_as_processes(queue, processes, start, pin_cores, run_threads)
  return queue.unfinished()


def _run_here(queue: RunQueue, start: float) -> None:
  while (run := next(queue.startable(), None)) is not None:
    logging.info("Sweep run: %s seed %d (%.0f s so far)", run.name, run.seed, time.time() - start)
    _run_in_process(run.overrides, run.seed, run.run_dir)
    queue.finish(run)


def _run_as_processes(queue: RunQueue, processes: int, start: float, pin_cores: bool,
                      run_threads: str = "all") -> None:
  """That many main.py processes at a time, each confined to cores of its own when `pin_cores`
  (unconfined, every process sizes its thread pools for the whole machine and they contend),
  with `RUN_THREADS[run_threads]` XLA threads."""
  from spt_jax import platform  # jax: imported once the sweep config has been checked
  slots = platform.core_slots(processes) if pin_cores else [None] * processes
  if run_threads not in RUN_THREADS:
    raise ValueError(f"run_threads={run_threads!r}: one of {sorted(RUN_THREADS)}.")
  # An unconfined run's pool is the whole machine's already.
  threads = platform.cpu_threads() if pin_cores and run_threads == "all" else 0
  free_slots, running = list(range(processes)), {}
  with concurrent.futures.ThreadPoolExecutor(processes) as pool:
    while True:
      for run in itertools.islice(queue.startable(), len(free_slots)):
        slot = free_slots.pop(0)
        logging.info("Sweep run: %s seed %d%s (%.0f s so far)", run.name, run.seed,
                     f" on core(s) {','.join(map(str, slots[slot]))}" if slots[slot] else "",
                     time.time() - start)
        future = pool.submit(_run_subprocess, run.overrides, run.seed, run.run_dir, slots[slot],
                             threads=threads)
        running[future] = (run, slot)
      if not running:
        return
      done, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
      for future in done:
        run, slot = running.pop(future)
        free_slots.append(slot)
        queue.finish(run, future.exception())


@dataclasses.dataclass(frozen=True)
class Slurm:
  """The SLURM backend: each run one single-node job, submitted through submitit once the runs it
  starts from have finished. `cluster='local'` runs the jobs as processes here (submitit's
  LocalExecutor), which is how the tests drive it."""
  folder: str = ""  # submitit's job scripts, pickles and logs; '' = <workdir>/submitit
  partition: str = ""  # '' = the cluster's default partition
  time_min: int = 240
  gpus: int = 1
  cpus_per_task: int = 8
  parameters: dict = dataclasses.field(default_factory=dict)  # other submitit `slurm_*` settings
  attempts: int = 3  # submissions of a run whose job fails before the sweep reports it
  cluster: str = "slurm"
  poll_s: float = 30.0


# Requeues of one job at its time limit before submitit fails it: each one resumes from the latest
# checkpoint, so a limit costs a restart, not the work; submitit's default of 3 would fail long runs.
TIME_LIMITS_PER_JOB = 50


def require_submitit():
  """submitit, or an error saying how to install it (an optional extra, not a core dependency)."""
  try:
    import submitit
  except ImportError:
    raise ImportError("The SLURM backend needs submitit: pip install -e '.[slurm]'") from None
  return submitit


def _with_folder(slurm: Slurm, workdir: str) -> Slurm:
  """`slurm` with its submitit folder set: by default <workdir>/submitit."""
  if slurm.folder:
    return slurm
  if is_url(workdir):
    raise ValueError(f"--slurm_folder is needed with the workdir {workdir}: submitit keeps its "
                     f"files on a filesystem that the nodes share.")
  return dataclasses.replace(slurm, folder=os.path.join(workdir, "submitit"))


class SubmittedRun:
  """What a run's job executes: main.py on the run, as the local backend starts it.

  submitit calls `checkpoint` on the job's time-limit or preemption signal, sent ahead of the end:
  main.py is asked to stop (SIGTERM: it saves its latest checkpoint and exits), and submitit
  requeues the job with a fresh copy of this run, which resumes from that checkpoint."""

  def __init__(self, overrides: dict, seed: int, run_dir: str):
    self.overrides, self.seed, self.run_dir = overrides, seed, run_dir
    self._process = None

  def __call__(self) -> None:
    # SLURM signals every process of the job step: main.py must not die of the time-limit signal,
    # which this process acts on (`checkpoint`).
    _run_subprocess(self.overrides, self.seed, self.run_dir, on_start=self._watch,
                    ignored_signals=(_time_limit_signal(),))

  def _watch(self, process) -> None:
    self._process = process

  def checkpoint(self):
    if self._process is not None:
      _stop_and_wait(self._process)
    return require_submitit().helpers.DelayedSubmission(
        SubmittedRun(self.overrides, self.seed, self.run_dir))


def _time_limit_signal() -> signal.Signals:
  """submitit's advance warning of a job's time limit or preemption: SIGUSR2, unless
  SUBMITIT_PREEMPT_SIGNAL names another (as submitit reads it)."""
  return signal.Signals["SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")]


def _stop_and_wait(process) -> None:
  """SIGTERM, then main.py's exit once its latest checkpoint is saved. This runs in submitit's
  signal handler, which may have interrupted Popen.wait holding its lock: hence os.waitpid."""
  process.send_signal(signal.SIGTERM)
  try:
    os.waitpid(process.pid, 0)
  except ChildProcessError:  # reaped already
    pass


def _executor(slurm: Slurm):
  submitit = require_submitit()
  executor = submitit.AutoExecutor(folder=slurm.folder, cluster=slurm.cluster,
                                   slurm_max_num_timeout=TIME_LIMITS_PER_JOB,
                                   local_max_num_timeout=TIME_LIMITS_PER_JOB)
  executor.update_parameters(
      timeout_min=slurm.time_min, nodes=1, tasks_per_node=1, gpus_per_node=slurm.gpus,
      cpus_per_task=slurm.cpus_per_task, slurm_partition=slurm.partition or None,
      **{f"slurm_{name}": value for name, value in slurm.parameters.items()})
  return executor


def _submit(executor, run: Run, start: float):
  executor.update_parameters(name=f"{run.name}/seed_{run.seed}")
  job = executor.submit(SubmittedRun(run.overrides, run.seed, run.run_dir))
  logging.info("Sweep run: %s seed %d, job %s (%.0f s so far)", run.name, run.seed, job.job_id,
               time.time() - start)
  return job


def _why_unfinished(job, run: Run) -> str | None:
  """None if the job's run finished; else why not. A job can end well before its run does: a
  SIGTERM (scancel, the time limit) stops main.py cleanly, with exit status 0."""
  try:
    job.result()
  except Exception as e:  # noqa: BLE001 - the run's log and the job's say the rest
    return (f"{run.run_dir}: job {job.job_id} failed ({type(e).__name__}); see "
            f"{run.run_dir}/log.txt and {job.paths.stderr}")
  if not finished(run.run_dir, run.overrides):
    return f"{run.run_dir}: job {job.job_id} ended before its run finished"
  return None


def _run_as_slurm_jobs(queue: RunQueue, slurm: Slurm, start: float) -> None:
  """Every startable run as a job at once; a job that fails or ends early is resubmitted (up to
  `slurm.attempts` in all), and its run resumes from its latest checkpoint. Stopping the sweep
  cancels its jobs, which save their latest checkpoints: a re-run resumes them."""
  executor = _executor(slurm)
  jobs = {}  # submitit job -> (run, its submissions so far)
  try:
    while True:
      for run in queue.startable():
        jobs[_submit(executor, run, start)] = (run, 1)
      if not jobs:
        return
      time.sleep(slurm.poll_s)
      for job in [job for job in jobs if job.done()]:
        run, attempt = jobs.pop(job)
        problem = _why_unfinished(job, run)
        if problem and attempt < slurm.attempts:
          logging.warning("%s (attempt %d of %d); resubmitted, it resumes from its latest "
                          "checkpoint.", problem, attempt, slurm.attempts)
          jobs[_submit(executor, run, start)] = (run, attempt + 1)
        else:
          queue.finish(run, problem)
  except BaseException:
    for job in jobs:
      job.cancel(check=False)
    raise


def run_sweep(sweep, workdir: str, processes: int = 1, source: str = "the sweep config",
              pin_cores: bool = True, slurm: Slurm | None = None,
              run_threads: str = "all") -> list[dict]:
  """Runs what is not finished yet, then writes the outputs; source names the config in errors.
  With processes > 1 and `pin_cores`, each run is confined to cores of its own
  (platform.core_slots), with the XLA threads `run_threads` names (RUN_THREADS); with `slurm`,
  each run is a SLURM job instead."""
  sweep = check_sweep(sweep, source)
  if slurm is not None:  # Before anything is written: a sweep that cannot submit changes nothing.
    require_submitit()
    slurm = _with_folder(slurm, workdir)
  runs = [parse_run(s) for s in sweep.runs]
  names = [n for n, _ in runs]
  if len(set(names)) != len(names):
    raise ValueError(f"Sweep run names must be unique: {names}")
  if sweep.x_values and len(sweep.x_values) != len(runs):
    raise ValueError(f"x_values has {len(sweep.x_values)} entries for {len(runs)} runs.")
  for name, overrides in runs:
    for missing in sorted(references(overrides) - set(names)):
      # A run outside the sweep may be started from once it has finished at every seed (a stage
      # of a study sliced out of a larger sweep); its recorded spec says what finished means.
      unfinished = [seed for seed in seeds_of(sweep, name)
                    if not _finished_elsewhere(os.path.join(workdir, missing, f"seed_{seed}"))]
      if unfinished:
        raise ValueError(f"{source}: run {name!r} starts from run {missing!r}, which the sweep "
                         f"does not list and which has not finished in {workdir} at seed(s) "
                         f"{unfinished}; add it to runs.")
  def substitute(overrides, seed):
    return {k: v.format(workdir=os.fspath(workdir_path(workdir)), seed=seed)
            if isinstance(v, str) else v for k, v in overrides.items()}
  for name, overrides in runs:
    for parent in sorted(references(overrides) & set(names)):
      missing = sorted(set(seeds_of(sweep, name)) - set(seeds_of(sweep, parent)))
      if missing:
        raise ValueError(f"{source}: run {name!r} starts from run {parent!r}, which 'run_seeds' "
                         f"leaves out at seed(s) {missing}.")
  all_runs = []
  for name, ov in runs:
    for seed in seeds_of(sweep, name):
      overrides = substitute(ov, seed)
      overrides.setdefault("config", sweep.base)
      all_runs.append(Run(name, overrides, seed, os.path.join(workdir, name, f"seed_{seed}"),
                          references(ov)))
  for run in all_runs:  # Before anything runs: a clash stops the sweep.
    if (workdir_path(run.run_dir) / RUN_SPEC).exists():
      check_run_spec(run.run_dir, {"overrides": run.overrides, "seed": run.seed})
  todo = [run for run in all_runs if not finished(run.run_dir, run.overrides)]
  logging.info("Sweep: %d runs, %d finished, %d to go.", len(all_runs), len(all_runs) - len(todo),
               len(todo))
  for run in todo:
    check_run_spec(run.run_dir, {"overrides": run.overrides, "seed": run.seed})
  failures = _schedule(todo, processes, time.time(), pin_cores, slurm, run_threads)
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
    report.sweep_curves(workdir, names, sorted({s for n in names for s in seeds_of(sweep, n)}),
                        os.path.join(workdir, sweep.output, report.SWEEP_FIGURE), sweep.title)
  except Exception as e:  # noqa: BLE001 - the table and plot stand without it
    logging.warning("Sweep curves not drawn (%s: %s).", type(e).__name__, e)
  return rows


def summarise(sweep, runs, workdir: str) -> list[dict]:
  rows = []
  for i, (name, _) in enumerate(runs):
    if not seeds_of(sweep, name):
      continue
    per_seed = []
    for seed in seeds_of(sweep, name):
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
  fewer = "".join(f" ({r['run']} at seeds {list(seeds_of(sweep, r['run']))} only)" for r in rows
                  if r["run"] in sweep.run_seeds)
  lines = [f"## {sweep.title}", "", f"base: `{sweep.base}`, seeds: {list(sweep.seeds)}{fewer}; "
           f"mean ± std over the seeds (numpy's default std, ddof 0)" + (
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
  slurm = _slurm_from_flags()
  from spt_jax import experiment, platform
  # As main.py's defaults (one device, the retained heap): in-process runs train here.
  platform.configure_process(None, cpu_devices=1, retain_freed_memory=True)
  experiment.quiet_orbax_logging()
  rows = run_sweep(sweep, flags.FLAGS.workdir, flags.FLAGS.processes, source,
                   pin_cores=flags.FLAGS.pin_cores, slurm=slurm,
                   run_threads=flags.FLAGS.run_threads)
  print((workdir_path(flags.FLAGS.workdir) / sweep.output / "table.md").read_text())
  del rows


def _slurm_from_flags() -> Slurm | None:
  """The SLURM backend's settings when --backend=slurm, else None (the local backend)."""
  f = flags.FLAGS
  if f.backend != "slurm":
    return None
  if f.processes != 1:
    raise app.UsageError("--processes is the local backend's: with --backend=slurm every run "
                         "that can start is a job at once.")
  parameters = {}
  for item in f.slurm_parameters:
    if "=" not in item:
      raise app.UsageError(f"--slurm_parameters: {item!r} is not name=value.")
    name, value = item.split("=", 1)
    parameters[name] = _literal(value)
  return Slurm(folder=f.slurm_folder, partition=f.slurm_partition, time_min=f.slurm_time_min,
               gpus=f.slurm_gpus, cpus_per_task=f.slurm_cpus_per_task, parameters=parameters,
               attempts=f.slurm_attempts)


def _define_flags():
  # Defined only when run as a program, so importing the library never claims global flag names.
  config_flags.DEFINE_config_file("config", None, "Sweep config file, optionally with ':variant'.",
                                  lock_config=True)
  flags.DEFINE_string("workdir", None, "Directory of the sweep's runs and outputs.")
  flags.DEFINE_integer("processes", 1, "Runs executed at once (separate main.py processes if > 1).")
  flags.DEFINE_bool("pin_cores", True, "With --processes > 1: confine each run to cores of its own "
                    "(main.py --cores), the same number for each, so that concurrent runs do not "
                    "oversubscribe them (their thread count: --run_threads).")
  flags.DEFINE_enum("run_threads", "all", sorted(RUN_THREADS), "With --processes > 1 and "
                    "--pin_cores: each run's XLA:CPU thread pool. " + " ".join(
                        f"'{k}': {v}" for k, v in RUN_THREADS.items()))
  flags.DEFINE_enum("backend", "local", ["local", "slurm"], "Where the runs train: 'local', on "
                    "this machine (--processes at a time), or 'slurm', one SLURM job per run "
                    "through submitit (pip install -e '.[slurm]'; the --slurm_* flags).")
  flags.DEFINE_string("slurm_folder", "", "submitit's job files and logs, on a filesystem the "
                      "nodes share; '' = <workdir>/submitit.")
  flags.DEFINE_string("slurm_partition", "", "The jobs' partition; '' = the cluster's default.")
  flags.DEFINE_integer("slurm_time_min", 240, "Each job's time limit in minutes; a run that needs "
                       "longer saves its latest checkpoint before it and is requeued to resume.")
  flags.DEFINE_integer("slurm_gpus", 1, "GPUs per job (each run is one process on one node).")
  flags.DEFINE_integer("slurm_cpus_per_task", 8, "CPU cores per job.")
  flags.DEFINE_integer("slurm_attempts", 3, "Submissions of a run whose job fails or is killed "
                       "before the sweep reports it; each resumes from the latest checkpoint.")
  flags.DEFINE_list("slurm_parameters", [], "Other settings of submitit's SLURM executor, "
                    "name=value, e.g. account=myproject,qos=high,mem_gb=64,constraint=a100.")
  flags.mark_flags_as_required(["config", "workdir"])


if __name__ == "__main__":
  _define_flags()
  app.run(main)
