"""What a phase's numbers depend on beyond its config: written to results.json as `environment`.

A resumed run is bit-identical only where the arithmetic is the same: the code, the packages, the
devices and, on the CPU, the processor (XLA:CPU picks its kernels by the instruction set) and the
size of XLA's thread pool (which decides how reductions split; spt_jax/platform.py). Sweeps and
study records outlive the machines they ran on, so each phase says where its numbers came from.
"""
from __future__ import annotations

import functools
import importlib.metadata
import os
import platform as python_platform
import subprocess

import jax

from spt_jax import platform

PACKAGES = ("spt_jax", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint")


def processor() -> str:
  """The CPU's model name (Linux: /proc/cpuinfo's `model name`), else what Python knows of it."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return python_platform.processor() or python_platform.machine()


@functools.lru_cache(maxsize=1)
def code_version() -> dict:
  """The git commit of the spt_jax source this process runs, and whether tracked files differ from
  it; both None outside a git checkout (an installed wheel, a `git archive` copy)."""
  source = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  git = lambda *args: subprocess.run(["git", "-C", source, *args], capture_output=True, text=True,
                                     timeout=10)
  try:
    top, head = git("rev-parse", "--show-toplevel"), git("rev-parse", "HEAD")
    # A copy of the source inside some other repository is not a checkout of spt_jax.
    if (head.returncode != 0 or top.returncode != 0
        or os.path.realpath(top.stdout.strip()) != os.path.realpath(source)):
      return {"commit": None, "modified": None}
    return {"commit": head.stdout.strip(), "modified": git("diff", "--quiet", "HEAD").returncode != 0}
  except (OSError, subprocess.SubprocessError):
    return {"commit": None, "modified": None}


def _version(package: str):
  try:
    return importlib.metadata.version(package)
  except importlib.metadata.PackageNotFoundError:
    return None


def environment() -> dict:
  """Versions, code, backend, devices and processes; on the CPU the processor and XLA's threads."""
  backend = platform.backend_name()
  record = {
      "packages": {name: _version(name) for name in PACKAGES},
      "python": python_platform.python_version(),
      "code": code_version(),
      "backend": backend,
      "device_kind": jax.devices()[0].device_kind,
      "devices": jax.device_count(),
      "processes": jax.process_count(),
      "processor": processor(),
  }
  if backend == "cpu":
    record["cpu_threads"] = platform.cpu_threads()
  return record
