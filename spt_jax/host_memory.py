"""Keeps freed host memory in the process, so XLA:CPU's per-step temporaries stop page-faulting.

XLA:CPU allocates an executable's temporaries as one block (122 MB for the benchmark's L=512 step at
batch 4, 263 MB at batch 8) with malloc when a step starts, and frees it when the step ends. glibc
serves a block that large with a fresh mmap, always from a thread other than the main one (its
per-thread arenas cannot hold it), and unmaps it on free. So every step page-faulted its whole
temporary block back in, the kernel zeroing each page: 31,000 faults per step on one core, 62,000 on
two per-core devices, 15-20% of the step (benchmarks/README.md). One malloc arena with mmap and
trimming off serves the block from the heap instead, where the next step finds it again.

The cost: the process keeps the peak of its heap (a training step needs it again every step anyway),
and threads share one arena, which XLA's few large allocations per step do not contend for.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
M_ARENA_MAX = -8
SETTINGS = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 2**31 - 1))


def retain_freed_memory() -> bool:
  """Applies `SETTINGS` through glibc's mallopt; True if it did. A no-op (False) without glibc
  (macOS, musl). Call it before JAX starts its backend: a thread that has already allocated keeps
  its own arena."""
  if not sys.platform.startswith("linux"):
    return False
  try:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.gnu_get_libc_version  # glibc only; musl has mallopt but ignores these parameters
  except (OSError, AttributeError):
    return False
  return all(libc.mallopt(parameter, value) == 1 for parameter, value in SETTINGS)
