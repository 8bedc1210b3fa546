"""Deterministic, resumable batching of in-memory arrays, sharded across processes.

The batch at training step s is a pure function of (seed, s): epoch e = s // steps_per_epoch is a fresh
permutation drawn from (seed, e). A resumed run therefore sees exactly the batches an uninterrupted run
would, with no iterator state to checkpoint. Each process materialises only its slice of every global
batch; the final partial batch of an epoch is dropped (documented remainder) so every step has the
same shape and nothing recompiles.
Evaluation instead visits every example exactly once: the last batch is padded with weight-0 copies.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np


def num_examples(arrays: Mapping[str, np.ndarray]) -> int:
  sizes = {k: len(v) for k, v in arrays.items()}
  if len(set(sizes.values())) != 1:
    raise ValueError(f"Arrays of one split must have equal length, got {sizes}.")
  return next(iter(sizes.values()))


def subset(arrays: Mapping[str, np.ndarray], count: int, *, seed: int,
           what: str = "subset") -> dict[str, np.ndarray]:
  """`count` examples of a split, drawn without replacement by `seed` and kept in split order: the
  same examples for every run of that seed, whatever else the run changes."""
  available = num_examples(arrays)
  if not 0 < count <= available:
    raise ValueError(f"{what}={count} must be between 1 and the split's {available} examples.")
  keep = np.sort(np.random.default_rng(seed).choice(available, count, replace=False))
  return {k: v[keep] for k, v in arrays.items()}


def _local_slice(global_batch: int, process_index: int, process_count: int) -> slice:
  if global_batch % process_count:
    raise ValueError(f"Global batch size {global_batch} is not divisible by the number of processes "
                     f"{process_count}.")
  per_process = global_batch // process_count
  return slice(process_index * per_process, (process_index + 1) * per_process)


def steps_per_epoch(n: int, global_batch: int) -> int:
  if n < global_batch:
    raise ValueError(f"The training split has {n} examples, fewer than one batch of {global_batch}.")
  return n // global_batch


def train_batches(arrays: Mapping[str, np.ndarray], global_batch: int, *, seed: int,
                  start_step: int = 0, process_index: int = 0, process_count: int = 1
                  ) -> Iterator[dict[str, np.ndarray]]:
  """Endless stream of this process's share of each global batch, starting at `start_step`."""
  n = num_examples(arrays)
  per_epoch = steps_per_epoch(n, global_batch)
  local = _local_slice(global_batch, process_index, process_count)
  step = start_step
  epoch, order = -1, None
  while True:
    if step // per_epoch != epoch:
      epoch = step // per_epoch
      order = np.random.default_rng([seed, epoch]).permutation(n)
    offset = (step % per_epoch) * global_batch
    # Sort the global batch, then slice: process i holds rows [i*B/P, (i+1)*B/P) of the one sorted
    # batch, so the global array is the same row order for every process count (so the same masks
    # per row) as long as the mesh lists the processes' devices in process order, which
    # experiment.make_mesh guarantees. Sorted indices make the gathers contiguous.
    idx = np.sort(order[offset:offset + global_batch])[local]
    batch = {k: v[idx] for k, v in arrays.items()}
    batch["weights"] = np.ones(len(idx), np.float32)
    yield batch
    step += 1


def eval_batches(arrays: Mapping[str, np.ndarray], global_batch: int, *, process_index: int = 0,
                 process_count: int = 1) -> Iterator[dict[str, np.ndarray]]:
  """Every example exactly once across processes; padding rows carry weight 0."""
  n = num_examples(arrays)
  local = _local_slice(global_batch, process_index, process_count)
  for start in range(0, n, global_batch):
    idx = np.arange(start, start + global_batch)
    weights = (idx < n).astype(np.float32)
    idx = np.minimum(idx, n - 1)[local]
    batch = {k: v[idx] for k, v in arrays.items()}
    batch["weights"] = weights[local]
    yield batch
