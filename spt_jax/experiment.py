"""A whole run: load the task once, run its phases in order, collect `<workdir>/results.json`.

A phase whose `results.json` exists is finished and is not re-run; a phase with checkpoints but no
results resumes from its latest checkpoint. Everything that can be checked before training is checked
first, for every phase: config values, the workdir (writable, same config, same data), and every
parameter pattern against the phases' parameter shapes (traced, not computed).
"""
from __future__ import annotations

import hashlib
import json
import logging as std_logging
import os
import tempfile

import jax
import ml_collections
import numpy as np
from absl import logging

from spt_jax import config_lib, faults, init_from, param_groups, train
from spt_jax.analysis import attention as attention_analysis
from spt_jax.data import tasks
from spt_jax.models import transformer
from spt_jax.metric_writers import write_json


def _not_orbax_info(record: std_logging.LogRecord) -> bool:
  return record.levelno >= std_logging.WARNING or "/orbax/" not in record.pathname


def quiet_orbax_logging() -> None:
  """Orbax logs every save and restore at INFO through absl; keep only its warnings and errors."""
  std_logging.getLogger("absl").addFilter(_not_orbax_info)


def make_mesh(devices=None) -> jax.sharding.Mesh:
  """A 1-D `data` mesh over `devices` (default: all of them)."""
  devices = jax.devices() if devices is None else list(devices)
  # Auto axes: the compiler propagates shardings from the batch (pure data parallelism); JAX 0.10's
  # make_mesh default (Explicit) would demand an out_sharding on every gather.
  return jax.make_mesh((len(devices),), ("data",), axis_types=(jax.sharding.AxisType.Auto,),
                       devices=devices)


# Settings that may change between a run and its resumption without changing what is computed.
_OPERATIONAL = ("data.data_dir", "data.cache_dir", "log_every_steps", "checkpoint_every_steps",
                "eval_batch_size")


# Fields added after workdirs were written, with the value that computes what those workdirs did: a
# workdir recorded without one matches a config that has this value ('{phase}': the phase's name).
# A model field reads as its ModelConfig default (a new model option defaults to the old model).
_ADDED_FIELDS = {**{f"model.{k}": v for k, v in transformer.section_defaults().items()},
                 "data.pixel_mean": 0.0, "data.pixel_std": 255.0, "data.downsample": 1,
                 "{phase}.weight_decay_on": "matrices"}


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
  path = os.path.join(phase_dir, "config.json")
  if not os.path.exists(path):
    return
  with open(path) as f:
    saved = _phase_view(ml_collections.ConfigDict(json.load(f)), name)
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


def prepare_workdir(workdir: str) -> None:
  """Creates the workdir; a file in its place or a directory that cannot be written is one error."""
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise NotADirectoryError(f"--workdir={workdir} is a file, not a directory.")
  try:
    os.makedirs(workdir, exist_ok=True)
    if jax.process_index() == 0:
      with tempfile.TemporaryFile(dir=workdir):
        pass
  except OSError as e:
    raise PermissionError(f"--workdir={workdir} cannot be written: {e.strerror or e}.") from None


DATA_RECORD = "data.json"  # per phase: the fingerprint and source of the data it trained on


def data_fingerprint(task: tasks.TaskData) -> str:
  """A hash of every array of every split: the data a phase trains on, by content."""
  h = hashlib.blake2b(digest_size=16)
  for split in sorted(task.splits):
    for key in sorted(task.splits[split]):
      array = np.ascontiguousarray(task.splits[split][key])
      h.update(f"{split}/{key}:{array.dtype.str}{array.shape};".encode())
      h.update(array.reshape(-1).view(np.uint8))
  return h.hexdigest()


def check_workdir_data(name: str, phase_dir: str, task: tasks.TaskData, fingerprint: str) -> None:
  """A workdir holds one experiment: a phase resumed or reused on other data is an error (the data
  location may change, as `data_dir` is an operational setting; its content may not)."""
  path = os.path.join(phase_dir, DATA_RECORD)
  if not os.path.exists(path):
    return
  with open(path) as f:
    saved = json.load(f)
  if saved.get("fingerprint") != fingerprint:
    raise ValueError(f"{phase_dir} was run on other data than phase {name!r} has now "
                     f"(fingerprint {saved.get('fingerprint')} from {saved.get('source')}, now "
                     f"{fingerprint} from {task.source}); use a new --workdir (nothing was "
                     f"changed).")


def _weights_figure(rows, losses, path: str, title: str) -> None:
  from spt_jax.analysis import plots  # Imported by runs that draw only: it loads matplotlib.
  plots.weights(rows, losses, path, title)


# The analysis a phase runs while it trains, handed to the trainer (which imports no analysis).
ANALYSIS_HOOKS = train.AnalysisHooks(attention_tracker=attention_analysis.tracker,
                                     weights_figure=_weights_figure)


def check_patterns(config, names, todo, loaded, workdir: str) -> None:
  """Every phase still to run: its `freeze`, `init_from` and init-scale patterns match the traced
  parameter paths, and what it loads exists and fits, before any phase trains."""
  planned = {n: train.abstract_params(config, n, loaded[data_section(config, n)])
             for n in names if data_section(config, n) in loaded}
  for name in todo:
    params = planned[name]
    param_groups.resolve(config[name].freeze, params, what=f"config.{name}.freeze")
    init_from.check(config[name].init_from, params, workdir=workdir, phase_names=names,
                    phase=name, planned=planned)


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
    if config.model.position == "learned" and a["max_length"] != b["max_length"]:
      problems.append(f"learned position tables differ in length ({a['max_length']} vs "
                      f"{b['max_length']}); use position='sinusoidal' or equal lengths")
    if problems:
      raise ValueError(f"Phase {name!r} cannot start from phase {source!r}: {a['task']} data "
                       f"({data_section(config, source)}) and {b['task']} data "
                       f"({data_section(config, name)}): " + "; ".join(problems) + ".")


def run(config, workdir: str) -> dict:
  faults.check_environment()
  config_lib.validate(config, jax.device_count())
  names = config_lib.phase_names(config)
  check_transfer_compatible(config, names)
  prepare_workdir(workdir)
  for name in names:
    check_workdir_config(config, name, os.path.join(workdir, name))
  results, loaded, fingerprints = {}, {}, {}
  for name in names:
    done = os.path.join(workdir, name, "results.json")
    if os.path.exists(done):
      with open(done) as f:
        results[name] = json.load(f)
  todo = [n for n in names if n not in results]
  for name in todo:  # Each data section is loaded once, however many phases use it.
    section = data_section(config, name)
    if section not in loaded:
      loaded[section] = tasks.load(config[section])
      fingerprints[section] = data_fingerprint(loaded[section])
  for name in names:
    section = data_section(config, name)
    if section in loaded:
      check_workdir_data(name, os.path.join(workdir, name), loaded[section], fingerprints[section])
  check_patterns(config, names, todo, loaded, workdir)

  mesh = make_mesh()
  for name in names:
    if name in results:
      logging.info("[%s] already finished (%s); not re-running it.", name,
                   os.path.join(workdir, name, "results.json"))
      continue
    section = data_section(config, name)
    task = loaded[section]
    if not os.path.exists(os.path.join(workdir, name, DATA_RECORD)):  # Else checked equal above.
      write_json(os.path.join(workdir, name, DATA_RECORD),
                 {"fingerprint": fingerprints[section], "source": task.source, "task": task.name})
    results[name] = train.train_phase(config, name, task, workdir, mesh, hooks=ANALYSIS_HOOKS)
    write_json(os.path.join(workdir, "results.json"), results)
    if jax.process_index() == 0:  # The phase's report.png / report.md, drawn from metrics.jsonl.
      try:
        from spt_jax.analysis import report  # Imported by runs that draw only: it loads matplotlib.
        report.write_reports(workdir, phase=name)
      except Exception as e:  # noqa: BLE001 - a report that fails to draw never loses a result
        logging.warning("[%s] report not written (%s: %s); `python -m spt_jax.report %s` retries.",
                        name, type(e).__name__, e, workdir)
    faults.point("phase_finished")
  write_json(os.path.join(workdir, "results.json"), results)
  last, section = names[-1], data_section(config, names[-1])
  if section in loaded and "test_of_best" in results[last]:
    logging.info("Result: %s test %s%s", last, results[last]["test_of_best"],
                 train.data_caveat(loaded[section]))
  return results
