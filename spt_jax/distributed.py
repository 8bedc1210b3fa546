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

Splitting one CPU host into per-core devices instead (main.py --cpu_devices) is platform set-up:
spt_jax/platform.py.
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
