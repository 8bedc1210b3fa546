"""Keeps freed host memory in the process, so XLA:CPU's per-step temporaries stop page-faulting.

XLA:CPU allocates an executable's temporaries as one block with malloc when a step starts, and
frees it when the step ends. glibc serves a block that large with a fresh mmap (it is above the
highest mmap threshold glibc accepts, 32 MB, and no per-thread arena can hold it) and unmaps it on
free. So every step page-faults its whole temporary block back in, the kernel zeroing each page: a
sizeable share of a CPU step (measured in benchmarks/README.md). One malloc arena with mmap and
trimming off serves the block from the heap instead, where the next step finds it again.

The cost is resident memory. The heap keeps what it grew to, and it grows past one temporary block
per device: blocks of overlapping steps (asynchronous dispatch) and small allocations that land in a
freed block's space make it keep several (about one block under synchronous dispatch).
`release_if_too_costly` therefore puts glibc's defaults back when a step's temporaries are large
next to the memory available (the trainer checks after compiling the step).
Threads share one arena, which XLA's few large allocations per step do not contend for.

Only the CPU backend's step temporaries live in host memory: on a GPU or TPU host they are device
memory, so there is nothing to gain, and the cost check (which compares temporaries with host memory)
means nothing. spt_jax/platform.py applies the settings only where the CPU backend will run.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

from absl import logging

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
M_ARENA_MAX = -8
SETTINGS = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 2**31 - 1))
# glibc's defaults for the two that make the heap keep memory (the one-arena setting stays: threads
# that already chose an arena keep it, and one arena is harmless).
DEFAULTS = ((M_MMAP_MAX, 65536), (M_TRIM_THRESHOLD, 128 * 1024))
# The most the retained heap was measured to hold, in temporary blocks per device (module docstring).
RETAINED_BLOCKS = 5

_libc = None


def _glibc():
  if not sys.platform.startswith("linux"):
    return None
  try:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.gnu_get_libc_version  # glibc only; musl has mallopt but ignores these parameters
  except (OSError, AttributeError):
    return None
  return libc


def retain_freed_memory() -> bool:
  """Applies `SETTINGS` through glibc's mallopt; True if it did. A no-op (False) without glibc
  (macOS, musl). Call it before JAX starts its backend: a thread that has already allocated keeps
  its own arena."""
  global _libc
  libc = _glibc()
  if libc is None or not all(libc.mallopt(p, value) == 1 for p, value in SETTINGS):
    return False
  _libc = libc
  return True


def retained() -> bool:
  """Whether `retain_freed_memory` is in effect (and not released since)."""
  return _libc is not None


def available_memory_bytes() -> int | None:
  """MemAvailable from /proc/meminfo; None where there is none."""
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except (OSError, ValueError, IndexError):
    pass
  return None


def release_if_too_costly(temp_bytes: int, devices: int = 1,
                          available_bytes: int | None = None) -> bool:
  """Puts glibc's defaults back (large blocks mapped afresh, the heap trimmed) if keeping `devices`
  programs' `temp_bytes` of temporaries each could take more than half the available memory, at
  `RETAINED_BLOCKS` blocks per device; returns whether it did. Steps then page-fault again: slower,
  never out of memory."""
  if _libc is None:
    return False
  available = available_memory_bytes() if available_bytes is None else available_bytes
  worst = RETAINED_BLOCKS * devices * temp_bytes
  if available is None or worst <= available / 2:
    return False
  release()
  logging.warning("The train step's temporaries (%.2f GB per device, %d device(s)) are too large to "
                  "keep in the heap with %.1f GB available: back to glibc's default malloc, which "
                  "page-faults them in every step (slower; spt_jax/host_memory.py).",
                  temp_bytes / 2**30, devices, available / 2**30)
  return True


def release() -> bool:
  """Puts glibc's defaults back (large blocks mapped afresh, the heap trimmed); returns whether
  `retain_freed_memory` was in effect."""
  global _libc
  if _libc is None:
    return False
  for parameter, value in DEFAULTS:
    _libc.mallopt(parameter, value)
  _libc = None
  return True
