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

Stopping: SIGTERM (a TPU VM's preemption notice, SLURM's --signal, `launch/tpu_pod.sh stop`,
launch/local.sh passing on its own) makes a training loop save its latest checkpoint and the process
exit 0 (`Stopped`); the same command resumes from there. Multi-process, XLA's preemption notifier owns
SIGTERM once jax.distributed.initialize has run (it catches the signal and tells the coordination
service; the process does not die), and the step to save at is JAX's preemption sync point, the same
step on every process. A single process has no notifier: `handle_sigterm` records the signal instead,
while a training loop runs (`stoppable`); outside one (loading data, the final test) SIGTERM ends the
process as before, losing nothing a resumed run would not redo.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Mapping

import jax
from absl import logging
from jax.experimental import multihost_utils

INIT = "SPT_JAX_INIT"
COORDINATOR = "SPT_JAX_COORDINATOR"
NUM_PROCESSES = "SPT_JAX_NUM_PROCESSES"
PROCESS_ID = "SPT_JAX_PROCESS_ID"
INIT_TIMEOUT = "SPT_JAX_INIT_TIMEOUT"
# Set by launch/local.sh: the process stops (SIGTERM: it saves at the next sync point) when the
# launcher dies, even of SIGKILL, instead of running on as an orphan that holds the workdir.
STOP_WITH_LAUNCHER = "SPT_JAX_STOP_WITH_LAUNCHER"
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
    handle_sigterm()
    return False
  if environ.get(STOP_WITH_LAUNCHER) == "1":
    stop_with_parent()
  jax.distributed.initialize(**kwargs)
  local = jax.local_devices()
  logging.info("JAX process %d of %d: %d local device(s) %s of %d in all (%s).",
               jax.process_index(), jax.process_count(), len(local), [d.id for d in local],
               jax.device_count(), local[0].platform)
  if jax.process_index() != 0:
    # Every process logs the same steps and evaluations; one copy (process 0's) is enough.
    logging.set_verbosity(logging.WARNING)
  return True


def stop_with_parent() -> None:
  """SIGTERM to this process when its parent exits (Linux PR_SET_PDEATHSIG; elsewhere nothing)."""
  import ctypes
  try:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(1, signal.SIGTERM) != 0:  # PR_SET_PDEATHSIG = 1
      return
  except (OSError, AttributeError):
    return
  if os.getppid() == 1:  # The launcher died before the request took effect.
    os.kill(os.getpid(), signal.SIGTERM)


# ---------------------------------------------------------------------------------------- Stopping
class Stopped(SystemExit):
  """A run stopped on request (SIGTERM) after saving its latest checkpoint: exit status 0."""

  def __init__(self, phase: str, step: int, where: str):
    super().__init__(0)
    self.phase, self.step, self.where = phase, step, where


_requested: int | None = None  # the signal a single process was asked to stop with
_armed = False  # inside a training loop, which saves before stopping
_checks = 0  # calls of stop_requested: the same sequence on every process


def _on_sigterm(signum, frame) -> None:
  global _requested
  if not _armed or _requested is not None:
    # Outside a training loop there is nothing to save, and a second signal insists: die of it, as
    # without this handler.
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    return
  _requested = signum
  logging.warning("SIGTERM received: saving the latest checkpoint after this step, then exiting "
                  "(a second SIGTERM ends the process at once).")


def handle_sigterm() -> bool:
  """Installs the single-process SIGTERM handler; False where Python cannot (not the main thread).
  Never for a multi-process run: it would take SIGTERM from XLA's notifier, so that this process
  alone would stop, at its own step, and leave the others waiting in a collective."""
  if threading.current_thread() is not threading.main_thread():
    return False
  signal.signal(signal.SIGTERM, _on_sigterm)
  return True


@contextlib.contextmanager
def stoppable():
  """The scope (a training loop) in which SIGTERM asks for a save and a clean stop."""
  global _armed, _requested
  previous, _armed = _armed, True
  try:
    yield
  except Stopped:
    _requested = None  # Acted on: a later run in this process (a test's) starts afresh.
    raise
  finally:
    _armed = previous


def stop_requested() -> bool:
  """Whether to save and stop after the current step. Every process calls it once per training
  step, so that each makes the same sequence of calls and JAX's preemption sync point, counted in
  calls, falls on the same step everywhere (phases restart their step numbers)."""
  global _checks
  _checks += 1
  if _requested is not None:
    return True
  # False when jax.distributed was not initialised (no notifier, so nothing to sync).
  return multihost_utils.reached_preemption_sync_point(_checks)
