"""Multi-process start-up: one JAX process per TPU host, per GPU (SLURM) or per local launch.

Opt-in, as big_vision's BV_JAX_INIT: with `SPT_JAX_INIT=1`, `jax.distributed.initialize()` runs
before anything touches a device. On a Cloud TPU pod and under SLURM it finds the coordinator, the
number of processes and this process's id by itself; `launch/local.sh` passes them instead through
  SPT_JAX_COORDINATOR     host:port of process 0's coordination service
  SPT_JAX_NUM_PROCESSES   how many processes take part
  SPT_JAX_PROCESS_ID      this process's id in [0, SPT_JAX_NUM_PROCESSES)
  SPT_JAX_INIT_TIMEOUT    seconds to wait for every process to connect (JAX's default: 300)
Each one that is set overrides auto-detection. Every process runs the same program on its own slice
of each batch (spt_jax/data/pipeline.py); process 0 alone writes metrics and JSON files, and the
other processes log warnings and errors only.

`split_cpu_into_devices` (main.py --cpu_devices) can instead split one CPU host into per-core
devices: an opt-in (the default, 1, keeps one device), since their in-process all-reduce can abort the
run when other processes load the cores (OPT_IN_RISK).
"""
from __future__ import annotations

import os
from collections.abc import Mapping

import jax
from absl import logging

INIT = "SPT_JAX_INIT"
COORDINATOR = "SPT_JAX_COORDINATOR"
NUM_PROCESSES = "SPT_JAX_NUM_PROCESSES"
PROCESS_ID = "SPT_JAX_PROCESS_ID"
INIT_TIMEOUT = "SPT_JAX_INIT_TIMEOUT"
# Any of these without SPT_JAX_INIT=1 means a launch meant to be multi-process.
_PROCESS_VARIABLES = (COORDINATOR, NUM_PROCESSES, PROCESS_ID)


def _int(environ: Mapping[str, str], name: str, minimum: int) -> int:
  value = environ[name].strip()
  if not value.isdigit() or int(value) < minimum:
    raise ValueError(f"{name}={environ[name]!r} must be an integer >= {minimum}.")
  return int(value)


def initialize_kwargs(environ: Mapping[str, str] = os.environ) -> dict | None:
  """The `jax.distributed.initialize` arguments the environment asks for; None: single process."""
  flag = environ.get(INIT, "")
  if flag not in ("", "0", "1"):
    raise ValueError(f"{INIT}={flag!r} must be 1 (multi-process) or 0/unset (single process).")
  if flag != "1":
    stray = [name for name in _PROCESS_VARIABLES if environ.get(name)]
    if stray:
      # Without initialisation every process would train alone on all the data and race the
      # others over one workdir: refuse rather than silently run N independent copies.
      raise ValueError(f"{', '.join(stray)} set without {INIT}=1; set {INIT}=1 for a "
                       f"multi-process run or unset them.")
    return None
  kwargs = {}
  if environ.get(COORDINATOR):
    address = environ[COORDINATOR]
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
      raise ValueError(f"{COORDINATOR}={address!r} must be host:port.")
    kwargs["coordinator_address"] = address
  if environ.get(NUM_PROCESSES):
    kwargs["num_processes"] = _int(environ, NUM_PROCESSES, 1)
  if environ.get(PROCESS_ID):
    kwargs["process_id"] = _int(environ, PROCESS_ID, 0)
    if "num_processes" in kwargs and kwargs["process_id"] >= kwargs["num_processes"]:
      raise ValueError(f"{PROCESS_ID}={kwargs['process_id']} is not below "
                       f"{NUM_PROCESSES}={kwargs['num_processes']}.")
  if environ.get(INIT_TIMEOUT):
    kwargs["initialization_timeout"] = _int(environ, INIT_TIMEOUT, 1)
  return kwargs


def maybe_initialize(environ: Mapping[str, str] = os.environ) -> bool:
  """Joins the multi-process job the environment describes; returns whether it did.

  Must run before the first use of a device (jax.devices(), an array, a mesh): the backend is
  created once, and one created before initialisation sees this process's devices only.
  """
  kwargs = initialize_kwargs(environ)
  if kwargs is None:
    return False
  jax.distributed.initialize(**kwargs)
  local = jax.local_devices()
  logging.info("JAX process %d of %d: %d local device(s) %s of %d in all (%s).",
               jax.process_index(), jax.process_count(), len(local), [d.id for d in local],
               jax.device_count(), local[0].platform)
  if jax.process_index() != 0:
    # Every process logs the same steps and evaluations; one copy (process 0's) is enough.
    logging.set_verbosity(logging.WARNING)
  return True


# ---------------------------------------------------------------------------------------- CPU hosts
def usable_cores() -> int:
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cpu_device_count(batch_sizes, cores: int) -> int:
  """The most CPU devices, at most `cores`, that divide every batch in `batch_sizes`."""
  return max(d for d in range(1, max(1, cores) + 1) if all(b % d == 0 for b in batch_sizes))


# What opting in to several CPU devices risks, in main.py's help text and in the warning logged when
# a run does (benchmarks/README.md, "CPU default under load (issue 15)").
OPT_IN_RISK = (
    "per-core CPU devices run the data-parallel step with an in-process all-reduce that XLA aborts "
    "after 40 s of waiting (rendezvous.cc: 'Termination timeout for all reduce ... Exiting to ensure "
    "a consistent program state') when other processes load the cores: 6 of 10 1000-step "
    "configs/synthetic_scratch.py runs died so beside 3 busy processes on 2 cores, against 0 of 15 "
    "with one device. The gain is on idle cores only (1.2-1.6x on 2 cores; none measurable under "
    "load; benchmarks/README.md). With other work on the machine keep the default, --cpu_devices=1. "
    "A resumed run must use the same device count to be bit-identical.")
_warned = False


def split_cpu_into_devices(config, requested: int,
                           environ: Mapping[str, str] = os.environ) -> int:
  """Makes a single-process run see one CPU device per core (`requested` < 0) or `requested` ones,
  fewer if the phases' batches do not divide; returns the count (1: left alone).

  main.py's default is 1 (--cpu_devices=1): one device, XLA's own multithreading, no cross-device
  collectives, which holds however loaded the machine is. Several devices are an opt-in: XLA:CPU
  runs one program on a shared thread pool that parallelises large ops only, so on idle cores a
  data-parallel step over per-core devices is faster (benchmarks/README.md), but the devices share
  that pool and block in an in-process all-reduce, which XLA aborts after 40 s when the cores are
  oversubscribed (OPT_IN_RISK; logged as a warning, once per process, when a run opts in). Only the
  CPU backend's device count changes: on a GPU or TPU host the accelerators stay the default
  devices. Multi-process launches keep one device per process. Must run before anything touches a
  device."""
  if initialize_kwargs(environ) is not None or requested in (0, 1):
    return 1  # Multi-process, or asked not to.
  names = [n.strip() for n in config.phases.split(",") if n.strip()]
  batches = [config[n][key] for n in names for key in ("batch_size", "eval_batch_size")
             if config[n][key] > 0]
  count = cpu_device_count(batches, usable_cores() if requested < 0 else requested)
  if not use_cpu_devices(count, environ):
    return 1
  global _warned
  if not _warned:
    _warned = True
    logging.warning("--cpu_devices=%d: %d CPU devices. Opt-in: %s", requested, count, OPT_IN_RISK)
  return count


def use_cpu_devices(count: int, environ: Mapping[str, str] = os.environ) -> bool:
  """Gives the CPU backend `count` devices, dispatched synchronously; False (nothing changed) for
  count <= 1 or when XLA_FLAGS already fixes the count by hand. Before anything touches a device."""
  if count <= 1 or "xla_force_host_platform_device_count" in environ.get("XLA_FLAGS", ""):
    return False
  jax.config.update("jax_num_cpu_devices", count)
  # One program in flight at a time: two multi-device programs (a step and an evaluation, say) could
  # each hold one pool thread while waiting for the other's all-reduce. Synchronous dispatch measured
  # no slower (the loop syncs on metrics anyway). It did not prevent the abort under load
  # (OPT_IN_RISK).
  jax.config.update("jax_cpu_enable_async_dispatch", False)
  return True
