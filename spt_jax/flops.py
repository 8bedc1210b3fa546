"""A phase's training compute, counted analytically: the matmul FLOPs of its train steps.

One train step is 3 × its forward pass (the backward pass is two matmuls per forward one: the input's
gradient and the kernel's). The forward pass is, over every kernel, 2 × the kernel's size × the rows
it multiplies:
  - the encoder's kernels (attention projections, MLP, a pixel input projection): every position of
    every sequence (an example is one sequence, or two for paired tasks);
  - the heads: every position for a head that predicts per position (masked-token, next-token), every
    example for one on pooled features (`Objective.per_sequence_heads`, e.g. the classifier);
  - attention itself: 4 × keys per query × d_model per position and layer (q·kᵀ and p·v); keys per
    query are the encoder's length, or three blocks for block-local attention.
Embedding lookups, LayerNorm, softmax, activations, the loss and the optimiser are not matmuls and are
not counted; padded positions are (the step computes them), and so are frozen kernels (their input
gradients are still computed). The same count, per token, is docs/expected_results.md's estimate.
"""
from __future__ import annotations

import math

from spt_jax import tree
from spt_jax.metric_writers import read_json, workdir_path


def _kernels(params) -> dict[str, int]:
  """'/'-joined path → size of every matmul kernel (embedding tables are lookups, not matmuls)."""
  return {path: math.prod(leaf.shape) for path, leaf in tree.flatten(params).items()
          if path.endswith("/kernel")}


def keys_per_query(model_cfg) -> int:
  length = model_cfg.encoder_length
  if model_cfg.attention == "local":
    return min(length, 3 * model_cfg.attention_block_size)
  return length


def forward_flops(params, model_cfg, input_shape, per_sequence_heads=("classifier",)) -> float:
  """Matmul FLOPs of one forward pass over a batch of inputs of `input_shape` ([B, L] or pairs
  [B, 2, L]) through `params` (arrays or shape structs)."""
  batch = input_shape[0]
  sequences = batch * math.prod(input_shape[1:-1])
  positions = sequences * model_cfg.encoder_length
  total = 0.0
  for path, size in _kernels(params).items():
    pooled = any(part in per_sequence_heads for part in path.split("/")[:-1])
    rows = batch if pooled else positions
    total += 2.0 * size * rows
  total += 4.0 * positions * keys_per_query(model_cfg) * model_cfg.d_model * model_cfg.num_layers
  return total


def train_step_flops(params, model_cfg, input_shape, per_sequence_heads=("classifier",)) -> float:
  """Matmul FLOPs of one train step: 3 × `forward_flops`."""
  return 3.0 * forward_flops(params, model_cfg, input_shape, per_sequence_heads)


def run_train_flops(run_dir: str) -> float:
  """The training FLOPs of every phase of the finished run in `run_dir` (its results.json)."""
  path = workdir_path(run_dir) / "results.json"
  if not path.exists():
    raise ValueError(f"match_compute_of={run_dir!r}: {path} does not exist; the run to match "
                     f"must have finished.")
  results = read_json(path)
  missing = [name for name, r in results.items() if "train_flops" not in r]
  if not results or missing:
    raise ValueError(f"match_compute_of={run_dir!r}: {path} records no training FLOPs for "
                     f"phase(s) {missing or '(none)'} (a run from before FLOPs were counted).")
  return float(sum(r["train_flops"] for r in results.values()))


def matched_steps(run_dir: str, step_flops: float) -> int:
  """Steps of `step_flops` each that spend as much compute as the run in `run_dir` (rounded up)."""
  return max(1, math.ceil(run_train_flops(run_dir) / step_flops))
