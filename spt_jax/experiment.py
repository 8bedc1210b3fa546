"""A whole run: load the task once, run its phases in order, collect `<workdir>/results.json`.

A phase whose `results.json` exists is finished and is not re-run; a phase with checkpoints but no
results resumes from its latest checkpoint. Everything that can be checked before training is checked
first, for every phase: config values, the workdir (writable, same config, same data), and every
parameter pattern against the phases' parameter shapes (traced, not computed).

The workdir is a local directory or an etils.epath URL (gs://bucket/run, reached through epath as in
spt_jax/metric_writers.py); data directories are local only, and a URL there is refused at once.
"""
from __future__ import annotations

import hashlib
import logging as std_logging
import os
import shutil
import tempfile
import uuid

import jax
import ml_collections
import numpy as np
from absl import logging
from etils import epath

from spt_jax import config_lib, faults, init_from, param_groups, train, workdir_lock
from spt_jax.analysis import attention as attention_analysis
from spt_jax.data import base as data_base
from spt_jax.data import tasks
from spt_jax.models import positions, transformer
from spt_jax.metric_writers import is_url, read_json, workdir_path, write_json


def _not_orbax_info(record: std_logging.LogRecord) -> bool:
  return record.levelno >= std_logging.WARNING or "/orbax/" not in record.pathname


def quiet_orbax_logging() -> None:
  """Orbax logs every save and restore at INFO through absl; keep only its warnings and errors."""
  std_logging.getLogger("absl").addFilter(_not_orbax_info)


def process_ordered(devices) -> list:
  """`devices` with every process's devices together, processes in order (a stable sort: each
  process's devices keep their order)."""
  return sorted(devices, key=lambda d: d.process_index)


def make_mesh(devices=None) -> jax.sharding.Mesh:
  """A 1-D `data` mesh over `devices` (default: all of them), in process order.

  Process order is what makes a global batch's row order independent of the process count: each
  process supplies its contiguous slice of the batch (pipeline.train_batches) to its own devices,
  so rows follow the mesh's devices; jax.make_mesh may order a pod's devices by physical topology,
  interleaving processes, and so is only asked for each process's own order."""
  devices = jax.devices() if devices is None else list(devices)
  # Auto axes: the compiler propagates shardings from the batch (pure data parallelism); JAX 0.10's
  # make_mesh default (Explicit) would demand an out_sharding on every gather.
  auto = (jax.sharding.AxisType.Auto,)
  mesh = jax.make_mesh((len(devices),), ("data",), axis_types=auto, devices=devices)
  ordered = process_ordered(mesh.devices.reshape(-1))
  return jax.sharding.Mesh(np.array(ordered), ("data",), axis_types=auto)


# Settings that may change between a run and its resumption without changing what is computed.
_OPERATIONAL = ("data.data_dir", "data.cache_dir", "log_every_steps", "checkpoint_every_steps",
                "eval_batch_size")


# Fields added after workdirs were written, with the value that computes what those workdirs did: a
# workdir recorded without one matches a config that has this value ('{phase}': the phase's name).
# A model field reads as its ModelConfig default (a new model option defaults to the old model).
_ADDED_FIELDS = {**{f"model.{k}": v for k, v in transformer.section_defaults().items()},
                 "data.pixel_mean": 0.0, "data.pixel_std": 255.0, "data.downsample": 1,
                 "{phase}.weight_decay_on": "matrices", "{phase}.select_on": "",
                 "{phase}.stop_on_plateau.patience": 0, "{phase}.stop_on_plateau.min_delta": 0.0,
                 "{phase}.stop_on_plateau.metric": "", "{phase}.stop_on_plateau.after_passing": None,
                 "{phase}.match_compute_of": "",
                 "{phase}.accumulate_steps": 1}


def data_section(config, phase: str) -> str:
  """The top-level config section holding phase `phase`'s data (cross-task SPT uses another one)."""
  return config[phase].data or "data"


def _phase_view(config, name: str) -> dict:
  """The part of the config that determines phase `name`'s results, flattened to dotted keys."""
  view = {"seed": config.seed, "data": config[data_section(config, name)].to_dict(),
          "model": config.model.to_dict(), name: config[name].to_dict()}
  flat = ((k, list(v) if isinstance(v, tuple) else v) for k, v in config_lib.flat_items(view))
  return {k: v for k, v in flat if not any(k == o or k.endswith("." + o) for o in _OPERATIONAL)}


def check_workdir_config(config, name: str, phase_dir: str) -> None:
  """A workdir holds one experiment: resuming or reusing it under another config is an error."""
  path = workdir_path(phase_dir) / "config.json"
  if not path.exists():
    return
  saved = _phase_view(ml_collections.ConfigDict(read_json(path)), name)
  current = _phase_view(config, name)
  for key, value in _ADDED_FIELDS.items():
    key = key.format(phase=name)
    if key in current and key not in saved:
      saved[key] = value
  diff = [f"{k}: {saved.get(k, '<absent>')!r} in the workdir, {current.get(k, '<absent>')!r} now"
          for k in sorted(saved.keys() | current.keys()) if saved.get(k) != current.get(k)]
  if diff:
    raise ValueError(f"{phase_dir} was run with a different config for phase {name!r}; use a new "
                     f"--workdir (nothing was changed):\n  " + "\n  ".join(diff))


def check_data_dirs(config, names) -> None:
  """Every data section the phases read has local `data_dir` and `cache_dir` (a URL is refused
  before any work; data_root refuses it again wherever a loader is called)."""
  for section in dict.fromkeys(data_section(config, n) for n in names):
    for key in ("data_dir", "cache_dir"):
      data_base.check_local(f"config.{section}.{key}", config[section].get(key, ""))


def prepare_workdir(workdir: str) -> None:
  """Creates the workdir; a file in its place, a directory that cannot be written or a URL that
  epath cannot reach is one error naming it."""
  try:
    path = workdir_path(workdir)
    if path.exists() and not path.is_dir():
      raise NotADirectoryError(f"--workdir={workdir} is a file, not a directory.")
    path.mkdir(parents=True, exist_ok=True)
    if jax.process_index() == 0:  # A file of this process's own, so that processes never collide.
      probe = path / f".write_test_{uuid.uuid4().hex}"
      probe.write_text("")
      probe.unlink()
  except NotADirectoryError:
    raise
  except OSError as e:
    raise PermissionError(f"--workdir={workdir} cannot be written: {e.strerror or e}.") from None
  except (ImportError, NotImplementedError, ValueError) as e:
    # epath without the client library of the URL's scheme (gcsfs for gs://), or a scheme it lacks.
    raise ValueError(f"--workdir={workdir} cannot be reached ({type(e).__name__}: {e}); gs:// "
                     f"needs pip install -e '.[gcs]'.") from None


DATA_RECORD = "data.json"  # per phase: the fingerprint and source of the data it trained on


def _update(h, split: str, arrays) -> None:
  for key in sorted(arrays):
    array = np.ascontiguousarray(arrays[key])
    h.update(f"{split}/{key}:{array.dtype.str}{array.shape};".encode())
    h.update(array.reshape(-1).view(np.uint8))


def data_fingerprint(task: tasks.TaskData) -> str:
  """A hash of every array of every split: the data a phase trains on, by content."""
  h = hashlib.blake2b(digest_size=16)
  for split in sorted(task.splits):
    _update(h, split, task.splits[split])
  return h.hexdigest()


def split_hashes(task: tasks.TaskData) -> dict[str, bytes]:
  """Per split, a 16-byte hash of its arrays' content."""
  out = {}
  for split in sorted(task.splits):
    h = hashlib.blake2b(digest_size=16)
    _update(h, split, task.splits[split])
    out[split] = h.digest()
  return out


def check_same_data_everywhere(section: str, task: tasks.TaskData) -> None:
  """Every process must train on the same data: each reads (or generates) its own copy, and one
  that differs (a stale cache, a different data_dir) would silently train each shard of a batch
  on other examples. Collective: every process calls it for the same sections in the same order."""
  if jax.process_count() == 1:
    return
  from jax.experimental import multihost_utils  # Multi-process runs only.
  hashes = split_hashes(task)
  mine = np.frombuffer(b"".join(hashes[s] for s in sorted(hashes)), np.uint8).reshape(-1, 16)
  everyone = np.asarray(multihost_utils.process_allgather(mine))  # [process, split, 16]
  bad = []
  for i, split in enumerate(sorted(hashes)):
    differ = [p for p in range(everyone.shape[0]) if not np.array_equal(everyone[p, i],
                                                                           everyone[0, i])]
    if differ:
      bad.append(f"split {split!r} differs on process(es) {differ} from process 0's")
  if bad:
    raise ValueError(
        f"The processes loaded different data for config.{section} ({task.source} on process "
        f"{jax.process_index()}): " + "; ".join(bad) + ". Each process reads its own copy: delete "
        "the differing cache_dir copies (or point data_dir at one shared copy) and rerun.")


def check_workdir_data(name: str, phase_dir: str, task: tasks.TaskData, fingerprint: str) -> None:
  """A workdir holds one experiment: a phase resumed or reused on other data is an error (the data
  location may change, as `data_dir` is an operational setting; its content may not)."""
  path = workdir_path(phase_dir) / DATA_RECORD
  if not path.exists():
    return
  saved = read_json(path)
  if saved.get("fingerprint") != fingerprint:
    raise ValueError(f"{phase_dir} was run on other data than phase {name!r} has now "
                     f"(fingerprint {saved.get('fingerprint')} from {saved.get('source')}, now "
                     f"{fingerprint} from {task.source}); use a new --workdir (nothing was "
                     f"changed).")


def _drawn_locally(draw, directory) -> None:
  """For a URL `directory` (matplotlib and the report module write local files only): runs
  `draw(local)` on a temporary local directory of the same name, which returns the paths it wrote
  there, and uploads them to the same places under `directory`."""
  remote = workdir_path(directory)
  scratch = tempfile.mkdtemp(prefix="spt_jax_draw_")
  try:
    local = os.path.join(scratch, remote.name)  # Reports title a run by its directory's name.
    os.makedirs(local)
    for path in draw(local):
      name = os.path.relpath(path, local)
      (remote / name).parent.mkdir(parents=True, exist_ok=True)
      (remote / name).write_bytes(epath.Path(path).read_bytes())
  finally:
    shutil.rmtree(scratch, ignore_errors=True)


def _weights_figure(rows, losses, path: str, title: str) -> None:
  from spt_jax.analysis import plots  # Imported by runs that draw only: it loads matplotlib.
  if not is_url(path):
    plots.weights(rows, losses, path, title)
    return
  path = workdir_path(path)

  def draw(local):
    plots.weights(rows, losses, os.path.join(local, path.name), title)
    return [os.path.join(local, path.name)]
  _drawn_locally(draw, os.fspath(path.parent))


def write_reports(workdir: str, phase: str, phases) -> None:
  """The phase's report.png / report.md and the run's report.md, drawn from metrics.jsonl. The
  report module reads and writes local files: a URL workdir's reports are drawn from a local copy
  of what they read (each phase's metrics.jsonl and config.json) and uploaded."""
  from spt_jax.analysis import report  # Imported by runs that draw only: it loads matplotlib.
  if not is_url(workdir):
    report.write_reports(workdir, phase=phase)
    return
  root = workdir_path(workdir)

  def draw(local):
    for name in phases:
      for file in (report.METRICS, "config.json", report.LEVELS):
        if (root / name / file).exists():
          os.makedirs(os.path.join(local, name), exist_ok=True)
          epath.Path(local, name, file).write_bytes((root / name / file).read_bytes())
    return report.write_reports(local, phase=phase)
  _drawn_locally(draw, workdir)


def write_reference_levels(config, name: str, task, workdir: str) -> None:
  """A masked-pretraining phase's reference levels (analysis/reference_levels.py), next to its
  results, for its report; other objectives have none."""
  if config[name].objective != "mlm":
    return
  from spt_jax.analysis import reference_levels  # numpy counting, after the phase has finished
  levels = reference_levels.for_phase(config, name, task)
  write_json(workdir_path(workdir) / name / reference_levels.LEVELS_FILE, levels)
  logging.info("[%s] reference levels (validation masked loss, accuracy): %s", name,
               {k: (round(v["loss"], 3), round(v["accuracy"], 3)) for k, v in levels.items()
                if isinstance(v, dict)})


# The analysis a phase runs while it trains, handed to the trainer (which imports no analysis).
ANALYSIS_HOOKS = train.AnalysisHooks(attention_tracker=attention_analysis.tracker,
                                     weights_figure=_weights_figure)


def check_patterns(config, names, todo, loaded, workdir: str) -> None:
  """Every phase still to run: its `freeze`, `init_from` and init-scale patterns match the traced
  parameter paths, what it loads exists and fits, and the validation metrics it selects on or
  watches for a plateau exist, before any phase trains."""
  planned = {n: train.abstract_params(config, n, loaded[data_section(config, n)])
             for n in names if data_section(config, n) in loaded}
  for name in todo:
    params = planned[name]
    param_groups.resolve(config[name].freeze, params, what=f"config.{name}.freeze")
    init_from.check(config[name].init_from, params, workdir=workdir, phase_names=names,
                    phase=name, planned=planned)
    train.check_phase_metrics(config, name, loaded[data_section(config, name)], params)


def check_transfer_compatible(config, names) -> None:
  """A phase initialised from another phase of the run must see data of the same kind and vocabulary
  (cross-task SPT works when they agree, e.g. Pathfinder pixels → CIFAR-10 pixels)."""
  for name in names:
    source = config[name].init_from.source
    if source not in names:
      continue
    a = tasks.signature(config[data_section(config, source)])
    b = tasks.signature(config[data_section(config, name)])
    problems = []
    if a["input_kind"] != b["input_kind"]:
      problems.append(f"input kinds differ ({a['input_kind']} vs {b['input_kind']})")
    elif a["vocab"] != b["vocab"]:
      problems.append(f"vocabularies differ ({len(a['vocab'])} tokens {a['vocab'][:5]}... vs "
                      f"{len(b['vocab'])} tokens {b['vocab'][:5]}...)")
    encoding = positions.get(config.model.position)
    if encoding.length_bound and a["max_length"] != b["max_length"]:
      problems.append(f"{encoding.name} position tables differ in length ({a['max_length']} vs "
                      f"{b['max_length']}); use position='sinusoidal' or equal lengths")
    if problems:
      raise ValueError(f"Phase {name!r} cannot start from phase {source!r}: {a['task']} data "
                       f"({data_section(config, source)}) and {b['task']} data "
                       f"({data_section(config, name)}): " + "; ".join(problems) + ".")


def _phase_dir(workdir: str, name: str) -> str:
  return os.fspath(epath.Path(workdir) / name)


def run(config, workdir: str) -> dict:
  faults.check_environment()
  config_lib.validate(config, jax.device_count())
  names = config_lib.phase_names(config)
  check_transfer_compatible(config, names)
  check_data_dirs(config, names)
  prepare_workdir(workdir)
  with workdir_lock.hold(workdir, jax.process_index()):
    return _run_phases(config, workdir, names)


def _run_phases(config, workdir: str, names) -> dict:
  for name in names:
    check_workdir_config(config, name, _phase_dir(workdir, name))
  results, loaded, fingerprints = {}, {}, {}
  for name in names:
    done = workdir_path(workdir) / name / "results.json"
    if done.exists():
      results[name] = read_json(done)
  todo = [n for n in names if n not in results]
  for name in todo:  # Each data section is loaded once, however many phases use it.
    section = data_section(config, name)
    if section not in loaded:
      loaded[section] = tasks.load(config[section])
      check_same_data_everywhere(section, loaded[section])
      fingerprints[section] = data_fingerprint(loaded[section])
  for name in names:
    section = data_section(config, name)
    if section in loaded:
      check_workdir_data(name, _phase_dir(workdir, name), loaded[section], fingerprints[section])
  check_patterns(config, names, todo, loaded, workdir)

  mesh = make_mesh()
  for name in names:
    if name in results:
      logging.info("[%s] already finished (%s); not re-running it.", name,
                   _phase_dir(workdir, name) + "/results.json")
      continue
    section = data_section(config, name)
    task = loaded[section]
    record = workdir_path(workdir) / name / DATA_RECORD
    if not record.exists():  # Else checked equal above.
      write_json(record,
                 {"fingerprint": fingerprints[section], "source": task.source, "task": task.name})
    results[name] = train.train_phase(config, name, task, workdir, mesh, hooks=ANALYSIS_HOOKS)
    write_json(workdir_path(workdir) / "results.json", results)
    if jax.process_index() == 0:  # The phase's report.png / report.md, drawn from metrics.jsonl.
      try:
        write_reference_levels(config, name, task, workdir)
      except Exception as e:  # noqa: BLE001 - levels that fail to compute never lose a result
        logging.warning("[%s] reference levels not computed (%s: %s); `python -m "
                        "spt_jax.analysis.reference_levels --run=%s` retries.", name,
                        type(e).__name__, e, _phase_dir(workdir, name))
      try:
        write_reports(workdir, name, names)
      except Exception as e:  # noqa: BLE001 - a report that fails to draw never loses a result
        logging.warning("[%s] report not written (%s: %s); `python -m spt_jax.report %s` retries.",
                        name, type(e).__name__, e, workdir)
    faults.point("phase_finished")
  write_json(workdir_path(workdir) / "results.json", results)
  last, section = names[-1], data_section(config, names[-1])
  if section in loaded and "test_of_best" in results[last]:
    logging.info("Result: %s test %s%s", last, results[last]["test_of_best"],
                 train.data_caveat(loaded[section]))
  return results
