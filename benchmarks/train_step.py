r"""Train-step throughput of spt_jax on this machine, against a PyTorch re-implementation.

  python benchmarks/train_step.py                      # default shapes, < 10 min on 2 idle cores
  python benchmarks/train_step.py --quick              # the cpu shape only, < 2 min
  python benchmarks/train_step.py --shapes listops --steps 10 --out /tmp/bench

For every shape and both step kinds (SPT pretraining, fine-tuning) the JAX step is the real one:
`spt_jax.train.make_steps` on a mesh over the local devices, with the state donated, fed batches of
`spt_jax.data.pipeline.train_batches` already placed with `train.to_global`. PyTorch eager and
`torch.compile` steps of `benchmarks/torch_reference.py` (same architecture, same parameter count,
asserted) run in the same process, interleaved with the JAX step one step at a time, so that load
from other processes hits all of them alike; speed ratios are medians of per-round ratios.
See benchmarks/README.md for the columns and the FLOP formula.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from spt_jax import config_lib, experiment, host_memory, optim, train, tree  # noqa: E402
from spt_jax import platform as spt_platform  # noqa: E402 (the stdlib's `platform` is used too)
from spt_jax.data import listops, pipeline  # noqa: E402
from spt_jax.data.tasks import TaskData  # noqa: E402
from spt_jax.data.vocab import BYTE_VOCAB  # noqa: E402
from spt_jax.models import attention as attention_lib  # noqa: E402

# Both frameworks run in this process, one step after the other. OpenMP's default waits by spinning
# after each parallel region, and torch's idle OpenMP threads took the cores from both frameworks'
# steps: confined to one core, each step ran ~30% slower than in a process of its own
# (benchmarks/README.md, "The batch in chunks"). Set before torch loads its OpenMP runtime, and only
# when this script times both (a module importing it times torch alone, with torch's defaults).
if __name__ == "__main__":
  os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:
  import torch
  import torch_reference
  TORCH_UNAVAILABLE = None
except ImportError as e:  # torch is the optional `bench` extra
  torch = torch_reference = None
  TORCH_UNAVAILABLE = f"torch not importable ({e}); pip install torch==2.13.0"


@dataclasses.dataclass(frozen=True)
class Shape:
  name: str
  num_layers: int
  d_model: int
  num_heads: int
  d_ff: int
  length: int
  batch: int          # the task's real global batch
  cpu_batch: int      # what a CPU-only run uses instead (stated in every table)
  vocab: object
  num_classes: int
  mask_rate: float
  input_kind: str = "tokens"
  pairs: bool = False  # retrieval: each example is two documents through one encoder
  pixel_loss: str = "l1"  # pixel SPT's loss: 'l1' (normalised value) or 'ce' (256-way)
  note: str = ""

  @property
  def sequences_per_example(self) -> int:
    return 2 if self.pairs else 1


SHAPES = {s.name: s for s in (
    Shape("cpu", 4, 128, 4, 512, 512, 32, 8, BYTE_VOCAB, 2, 0.15,
          note="byte tokens, lengths uniform in [L/2, L]"),
    Shape("pathfinder", 4, 128, 8, 128, 1024, 32, 4, BYTE_VOCAB, 2, 0.5, input_kind="pixels",
          note="8-bit pixels through the 2→d projection; pixel SPT with the L1 loss"),
    Shape("retrieval", 4, 128, 4, 512, 4000, 32, 1, BYTE_VOCAB, 2, 0.15, pairs=True,
          note="document pairs (2×4000 bytes per example), [u,v,u·v,u−v] classifier"),
    Shape("listops", 6, 512, 8, 2048, 2000, 32, 1, listops.VOCAB, 10, 0.1,
          note="ListOps tokens, lengths uniform in [L/2, L]"),
    # The LRA-at-CPU-scale study's models (configs/listops_spt.py:cpu, configs/pathfinder_spt.py:cpu,
    # docs/lra_cpu.md): where this project's CPU time actually goes. Their batch is the task's.
    Shape("study_listops", 2, 64, 4, 256, 256, 32, 32, listops.VOCAB, 10, 0.1,
          note="the study's ListOps model: ListOps tokens, lengths uniform in [L/2, L]"),
    Shape("study_pathfinder", 2, 64, 4, 64, 256, 32, 32, BYTE_VOCAB, 2, 0.5, input_kind="pixels",
          pixel_loss="ce", note="the study's Pathfinder model: 16x16 pixels, 256-way pixel SPT"),
)}
DEFAULT_SHAPES = ("cpu", "pathfinder", "retrieval", "listops", "study_listops", "study_pathfinder")
# --tiny: every shape shrunk to this model and at most this length, so that a dry run of a script
# that benchmarks the real shapes (benchmarks/accelerator_check.sh --platform=cpu) takes seconds.
TINY_MODEL = dict(num_layers=1, d_model=32, num_heads=2, d_ff=64)
TINY_MAX_LENGTH = 64


def tiny_shape(shape: Shape) -> Shape:
  return dataclasses.replace(shape, **TINY_MODEL, length=min(shape.length, TINY_MAX_LENGTH),
                             note=f"tiny (--tiny): {shape.note}")


# The budget check predicts with at least this peak (GFLOP/s, this CPU idle), so which default shapes
# run does not depend on how loaded the machine happens to be.
NOMINAL_PEAK_GFLOPS = 280.0
KINDS = ("pretrain", "finetune")
# Rough fractions of the matmul peak each implementation reached here (env notes, 2026-11-30); used
# only to predict whether a shape fits the time budget before spending minutes on it.
EXPECTED_MFU = {"jax": 0.08, "torch_eager": 0.35, "torch_compiled": 0.3}


# ------------------------------------------------------------------------------------------ machine


def machine_info() -> dict:
  cpu = "unknown"
  with contextlib.suppress(OSError):
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          cpu = line.split(":", 1)[1].strip()
          break
  mem_gb = None
  with contextlib.suppress(OSError, ValueError):
    with open("/proc/meminfo") as f:
      mem_gb = round(int(f.readline().split()[1]) / 2**20, 1)
  versions = {"python": platform.python_version(), "jax": jax.__version__}
  for name in ("jaxlib", "flax", "optax", "numpy"):
    with contextlib.suppress(ImportError):
      versions[name] = __import__(name).__version__
  if torch is not None:
    versions["torch"] = torch.__version__
  return {
      "cpu": cpu, "logical_cores": os.cpu_count(),
      "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
      "memory_gb": mem_gb, "platform": platform.platform(), "jax_backend": jax.default_backend(),
      "jax_devices": [str(d) for d in jax.devices()],
      "torch_threads": torch.get_num_threads() if torch is not None else None,
      "torch_device": torch_device() if torch is not None else None,
      "torch_float32_matmul_precision": (torch.get_float32_matmul_precision()
                                         if torch is not None else None),
      "xla_flags": os.environ.get("XLA_FLAGS", ""), "versions": versions,
      "date": datetime.datetime.now().isoformat(timespec="seconds"),
  }


def available_memory_bytes() -> float:
  """Free memory where the JAX step runs: the accelerator's limit, else the host's MemAvailable."""
  if jax.default_backend() != "cpu":
    with contextlib.suppress(Exception):
      stats = jax.devices()[0].memory_stats() or {}
      if "bytes_limit" in stats:
        return stats["bytes_limit"] - stats.get("bytes_in_use", 0)
  host = host_memory.available_memory_bytes()
  return math.inf if host is None else host


class MatmulProbe:
  """Times the best of `repeats` float32 n³ JAX matmuls; called once per round, it gives each
  round's own peak, so MFU stays meaningful while other processes' load comes and goes."""

  def __init__(self, n: int, repeats: int = 3):
    self.n, self.repeats = n, repeats
    self.a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
    self.b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
    self.mm = jax.jit(jnp.matmul)
    self.mm(self.a, self.b).block_until_ready()

  def __call__(self) -> float:
    best = math.inf
    for _ in range(self.repeats):
      start = time.perf_counter()
      self.mm(self.a, self.b).block_until_ready()
      best = min(best, time.perf_counter() - start)
    return best

  def gflops(self, seconds: float) -> float:
    return 2 * self.n**3 / seconds / 1e9


def probe_size(tiny: bool) -> int:
  """The matmul probe's n: large enough to reach the backend's peak; --tiny's only fills the column
  (a 2048³ probe per round would be most of a dry run's time on a CPU)."""
  return 512 if tiny else 2048 if jax.default_backend() == "cpu" else 8192


def jax_matmul_gflops(n: int, repeats: int = 8) -> float:
  probe = MatmulProbe(n, repeats)
  return probe.gflops(probe())


# ------------------------------------------------------------------------------------------ data


def synthetic_arrays(shape: Shape, num_examples: int, seed: int = 0) -> dict[str, np.ndarray]:
  """Random inputs of the shape's kind, with the padding pattern real data of the task has."""
  rng = np.random.default_rng(seed)
  docs = (num_examples, shape.sequences_per_example, shape.length)
  if shape.input_kind == "pixels":
    inputs = rng.integers(0, 256, docs, dtype=np.uint8)
  else:
    inputs = rng.integers(shape.vocab.first_regular_id, shape.vocab.size, docs).astype(np.uint16)
    lengths = rng.integers(shape.length // 2, shape.length + 1, docs[:2])
    inputs[np.arange(shape.length) >= lengths[..., None]] = 0
  if not shape.pairs:
    inputs = inputs[:, 0]
  return {"inputs": inputs, "labels": rng.integers(0, shape.num_classes, num_examples, np.int32)}


def analytic_flops(shape: Shape, kind: str, batch: int) -> dict[str, float]:
  """Matmul FLOPs of one train step (forward + backward = 3 × forward), split by where they occur.

  dense:     6 · tokens · layers · (4d² + 2·d·d_ff)      (q, k, v, out projections and the MLP)
  attention: 12 · sequences · L² · d · layers             (q kᵀ and p v: 2·2L²d forward, twice that back)
  head:      6 · tokens · d · outputs (MLM) or 6 · batch · features · classes (classifier), plus the
             6 · tokens · 2 · d of the pixel input projection
  Embedding gathers, LayerNorm, softmax, GELU and the optimiser are not counted (not matmuls).
  """
  d, layers = shape.d_model, shape.num_layers
  sequences = batch * shape.sequences_per_example
  tokens = sequences * shape.length
  dense = 6 * tokens * layers * (4 * d * d + 2 * d * shape.d_ff)
  attention = 12 * sequences * shape.length**2 * d * layers
  if kind == "pretrain":
    outputs = 1 if shape.input_kind == "pixels" else shape.vocab.size
    head = 6 * tokens * d * outputs
  else:
    head = 6 * batch * d * (4 if shape.pairs else 1) * shape.num_classes
  if shape.input_kind == "pixels":
    head += 6 * tokens * 2 * d
  return {"dense": dense, "attention": attention, "head": head,
          "total": dense + attention + head}


# ------------------------------------------------------------------------------------------ JAX


class CompileCounter:
  """Counts XLA compilations of functions named `name` through jax.monitoring (public API)."""

  def __init__(self, name: str = "train_step"):
    self.name, self.count = name, 0

  def __call__(self, event, duration, **kwargs):
    if event == "/jax/core/compile/backend_compile_duration" and self.name in str(
        kwargs.get("fun_name", "")):
      self.count += 1

  def __enter__(self):
    jax.monitoring.register_event_duration_secs_listener(self)
    return self

  def __exit__(self, *exc):
    with contextlib.suppress(Exception):  # a listener left behind only counts, it never fails
      jax.monitoring.unregister_event_duration_listener(self)


@contextlib.contextmanager
def _patched(module, name: str, value):
  original = getattr(module, name)
  setattr(module, name, value)
  try:
    yield
  finally:
    setattr(module, name, original)


def patched_attention(core):
  """Temporarily routes MultiHeadAttention's `attend` to `core` (only while the step is traced)."""
  return contextlib.nullcontext() if core is None else _patched(attention_lib, "attend", core)


def _xla_dot_product_attention(q, k, v, key_mask, **_):
  return jax.nn.dot_product_attention(q, k, v, mask=key_mask[:, None, None, :]), None


def _no_attention_core(q, k, v, key_mask, **_):
  # q + k + v keeps the projections (and their gradients) alive; only the L² work disappears.
  return q + k + v, None


JAX_CORES = {"xla-dpa": _xla_dot_product_attention, "no-attention-core": _no_attention_core}


class JaxStep:
  """The real spt_jax train step for one shape and step kind, with its state and device batches."""

  def __init__(self, shape: Shape, kind: str, batch: int, arrays, *, attention: str = "auto",
               block_size: int = 512, core=None, dtype: str = "float32",
               whole_batch: bool = False):
    objective_name = "mlm" if kind == "pretrain" else "classification"
    extra = ({"pixel_loss": shape.pixel_loss}
             if kind == "pretrain" and shape.input_kind == "pixels" else {})
    phase = config_lib.phase_config(objective_name, mask_rate=shape.mask_rate, batch_size=batch,
                                    num_steps=1000, **extra)
    self.task = TaskData(shape.name, shape.vocab, shape.num_classes, shape.length,
                         {"train": arrays}, "synthetic benchmark data",
                         input_kind=shape.input_kind)
    model_cfg = config_lib.transformer_config(
        num_layers=shape.num_layers, d_model=shape.d_model, num_heads=shape.num_heads,
        d_ff=shape.d_ff, pooling="mean", attention=attention, attention_block_size=block_size,
        dtype=dtype)
    # whole_batch: blockwise attention over the whole batch at once, not the platform's loop over it.
    with (_patched(spt_platform, "sequence_chunk", lambda *a, **k: 0) if whole_batch
          else contextlib.nullcontext()):
      objective = train.make_objective(
          ml_collections.ConfigDict(dict(model=model_cfg, phase=phase)), "phase", self.task)
    model = objective.model
    self.mlm_outputs = model.mlm_outputs
    # As main.py: data-parallel over as many (per-core CPU) devices as the batch divides into.
    mesh = experiment.make_mesh(jax.devices()[:spt_platform.cpu_device_count([batch],
                                                                              jax.device_count())])
    self.devices = mesh.size
    replicated = NamedSharding(mesh, P())
    self.batch_sharding = NamedSharding(mesh, P("data"))
    dummy = jnp.zeros((1,) + arrays["inputs"].shape[1:], jnp.int32)
    params = jax.jit(lambda r: objective.init_params(r, dummy),
                     out_shardings=replicated)(jax.random.PRNGKey(0))
    self.num_params = tree.count(params)
    tx, _ = optim.make_optimizer(phase, 1000, params, frozenset())
    opt_state = jax.jit(tx.init, out_shardings=replicated)(params)
    self.state = train.TrainState(jax.device_put(jnp.asarray(0, jnp.int32), replicated), params,
                                  opt_state)
    self.step, _ = train.make_steps(objective, tx, jax.tree.map(lambda _: True, params),
                                    mesh)
    self.rng = jax.device_put(jax.random.PRNGKey(1), replicated)
    host = pipeline.train_batches(arrays, batch, seed=0)
    self.host_batches = [next(host) for _ in range(4)]
    self.batches = [train.to_global(b, self.batch_sharding) for b in self.host_batches]
    self.calls = 0
    start = time.perf_counter()
    with patched_attention(core):
      compiled = self.step.lower(self.state, self.batches[0], self.rng).compile()
    self.compile_s = time.perf_counter() - start
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    self.xla_flops = float(cost.get("flops", float("nan"))) if cost else float("nan")
    memory = compiled.memory_analysis()
    self.temp_bytes = getattr(memory, "temp_size_in_bytes", None) if memory is not None else None
    # Running a step that cannot fit would get the process killed rather than raise: refuse first.
    if self.temp_bytes and self.temp_bytes > 0.8 * available_memory_bytes():
      raise MemoryError(f"the step needs {self.temp_bytes / 2**30:.1f} GiB of temporaries, more "
                        f"than 80% of the {available_memory_bytes() / 2**30:.1f} GiB available")
    self.compiles = CompileCounter()

  def __call__(self) -> float:
    batch = self.batches[self.calls % len(self.batches)]
    self.calls += 1
    with self.compiles:
      start = time.perf_counter()
      self.state, metrics, _ = self.step(self.state, batch, self.rng)
      jax.block_until_ready((self.state, metrics))
      elapsed = time.perf_counter() - start
    # The lowering above must be what runs: a recompile would time something else (and is a bug).
    if self.compiles.count:
      raise RuntimeError(f"the JAX train step recompiled at call {self.calls}; "
                         "benchmark numbers would include compilation.")
    return elapsed


# ------------------------------------------------------------------------------------------ torch


def torch_device() -> str:
  """Torch runs where JAX runs: on the GPU when JAX has one and torch can use it."""
  if jax.default_backend() == "gpu" and torch.cuda.is_available():
    return "cuda"
  return "cpu"


class TorchStep:

  def __init__(self, shape: Shape, kind: str, host_batches, mlm_outputs: int, *,
               compile: bool, attention_core: str = "sdpa"):
    self.device = torch_device()
    if kind == "pretrain":
      objective = "pixel_mlm" if shape.input_kind == "pixels" else "mlm"
    else:
      objective = "classification"
    self.step = torch_reference.build(
        objective=objective, mask_rate=shape.mask_rate, pixel_loss=shape.pixel_loss,
        compile=compile,
        vocab_size=shape.vocab.size, max_length=shape.length,
        head="mlm" if kind == "pretrain" else "classifier", num_classes=shape.num_classes,
        num_layers=shape.num_layers, d_model=shape.d_model, num_heads=shape.num_heads,
        d_ff=shape.d_ff, input_kind=shape.input_kind, mlm_outputs=mlm_outputs, pairs=shape.pairs,
        attention_core=attention_core, device=self.device)
    self.num_params = torch_reference.num_parameters(self.step.model)
    self.batches = [torch_reference.as_tensors(b, shape.input_kind, self.device)
                    for b in host_batches]
    self.calls = 0
    # The first call compiles under torch.compile (and allocates in eager); it is never timed.
    self.compile_s = self()

  def __call__(self) -> float:
    inputs, labels = self.batches[self.calls % len(self.batches)]
    self.calls += 1
    start = time.perf_counter()
    self.step(inputs, labels)
    torch_reference.synchronize(self.device)
    return time.perf_counter() - start


# ------------------------------------------------------------------------------------------ timing


def interleave(steps: dict, rounds: int, warmup: int) -> dict[str, list[float]]:
  """Runs one step of each implementation per round, in a rotating order; returns timed rounds."""
  names = list(steps)
  times = {n: [] for n in names}
  for r in range(warmup + rounds):
    # Rotating the order keeps any "runs right after X" effect from always favouring one of them.
    for n in names[r % len(names):] + names[:r % len(names)]:
      t = steps[n]()
      if r >= warmup:
        times[n].append(t)
  return times


def paired_ratio(numerator: list[float], denominator: list[float]) -> float:
  return statistics.median(a / b for a, b in zip(numerator, denominator))


def pipeline_batches_per_s(arrays, batch: int, sharding, min_s: float = 1.0,
                           min_batches: int = 10) -> float:
  """Host batching (`train_batches`) plus placement (`make_array_from_process_local_data`)."""
  batches = pipeline.train_batches(arrays, batch, seed=1)
  jax.block_until_ready(train.to_global(next(batches), sharding))
  count, start = 0, time.perf_counter()
  while count < min_batches or time.perf_counter() - start < min_s:
    jax.block_until_ready(train.to_global(next(batches), sharding))
    count += 1
  return count / (time.perf_counter() - start)


def first_line(e: BaseException) -> str:
  text = f"{type(e).__name__}: {e}".strip()
  return text.splitlines()[0][:300]


# ------------------------------------------------------------------------------------------ runs


def estimate_seconds(shape: Shape, batch: int, rounds: int, peak: float, impls) -> float:
  per_round = sum(analytic_flops(shape, kind, batch)["total"] for kind in KINDS)
  return (rounds + 1) * sum(per_round / (EXPECTED_MFU[i] * peak * 1e9) for i in impls)


def bench_kind(shape: Shape, kind: str, batch: int, args, log) -> dict:
  arrays = synthetic_arrays(shape, max(64, 8 * batch))
  tokens = batch * shape.sequences_per_example * shape.length
  row = {"shape": shape.name, "kind": kind, "length": shape.length, "batch": batch,
         "full_batch": shape.batch, "tokens_per_step": tokens, "note": shape.note,
         "dtype": args.dtype, "model": f"{shape.num_layers}x{shape.d_model}"}
  jx = JaxStep(shape, kind, batch, arrays, dtype=args.dtype)
  row.update(params=jx.num_params, jax_devices=jx.devices, jax_compile_s=jx.compile_s,
             xla_flops=jx.xla_flops,
             jax_temp_gb=None if jx.temp_bytes is None else jx.temp_bytes / 2**30,
             analytic_flops=analytic_flops(shape, kind, batch))
  log(f"  [{shape.name}/{kind}] JAX compiled in {jx.compile_s:.1f}s, {jx.num_params:,} params, "
      f"XLA {jx.xla_flops / 1e9:.1f} GFLOP/step")
  steps = {"jax": jx}
  torch_notes = {}
  if torch is None or not args.torch or args.dtype != "float32":
    torch_notes["torch_eager"] = torch_notes["torch_compiled"] = (
        TORCH_UNAVAILABLE if torch is None else "not run (--no-torch)" if not args.torch else
        f"not run: the PyTorch reference is float32 only (--dtype={args.dtype})")
  else:
    variants = [("torch_eager", False)] + ([("torch_compiled", True)] if args.torch_compile else [])
    if not args.torch_compile:
      torch_notes["torch_compiled"] = "not run (--no-torch-compile or --quick)"
    for name, compile in variants:
      try:
        ts = TorchStep(shape, kind, jx.host_batches, jx.mlm_outputs, compile=compile)
      except Exception as e:  # noqa: BLE001 - report why torch.compile is unavailable, go on
        torch_notes[name] = first_line(e)
        log(f"  [{shape.name}/{kind}] {name} unavailable: {torch_notes[name]}")
        if args.verbose:
          traceback.print_exc()
        continue
      if ts.num_params != jx.num_params:
        raise AssertionError(f"{shape.name}/{kind}: the torch reference has {ts.num_params:,} "
                             f"parameters, the JAX model {jx.num_params:,}; they must match.")
      row[f"{name}_first_call_s"] = ts.compile_s
      steps[name] = ts
  probe = MatmulProbe(probe_size(args.tiny))
  steps["matmul"] = probe
  times = interleave(steps, args.steps, args.warmup)
  peaks = [probe.gflops(t) for t in times.pop("matmul")]
  row["torch_notes"] = torch_notes
  row["times_s"] = times
  row["round_peak_gflops"] = peaks

  def mfu(flops, ts):  # each round's step against the same round's matmul peak
    return statistics.median(flops / t / (p * 1e9) for t, p in zip(ts, peaks))

  for name, ts in times.items():
    median = statistics.median(ts)
    row[f"{name}_ms"] = 1e3 * median
    row[f"{name}_tok_s"] = tokens / median
    row[f"{name}_mfu"] = mfu(jx.xla_flops if name == "jax" else row["analytic_flops"]["total"], ts)
    if name != "jax":
      row[f"{name}_speedup"] = paired_ratio(times["jax"], ts)
  row["jax_mfu_analytic"] = mfu(row["analytic_flops"]["total"], times["jax"])
  # --tiny times the pipeline only long enough to fill the column: a dry run measures nothing.
  row["input_batches_s"] = pipeline_batches_per_s(arrays, batch, jx.batch_sharding,
                                                  min_s=0.1 if args.tiny else 1.0)
  row["step_batches_s"] = 1e3 / row["jax_ms"]
  log(f"  [{shape.name}/{kind}] " + ", ".join(
      f"{n} {row[n + '_tok_s']:,.0f} tok/s" for n in times) +
      f"; input {row['input_batches_s']:.0f} batches/s vs step {row['step_batches_s']:.2f}")
  del steps, jx
  jax.clear_caches()
  return row


def bench_breakdown(shape: Shape, batch: int, args, peak: float, log) -> list[dict]:
  """Where the JAX pretraining step's time goes: the same step with the attention swapped out,
  timed interleaved with torch eager using its fused, unfused and removed attention."""
  kind = "pretrain"
  arrays = synthetic_arrays(shape, max(64, 8 * batch))
  flops = analytic_flops(shape, kind, batch)
  # `jax auto` is the step as users get it (model.attention's default); the rest swap the attention.
  variants = {"jax auto": dict(), "jax dense": dict(attention="dense")}
  if "blockwise" in attention_lib.IMPLEMENTATIONS:
    for block in args.blocks:
      if block < shape.length:
        variants[f"jax blockwise-{block}"] = dict(attention="blockwise", block_size=block)
    for block in sorted({b for b in args.blocks if b < shape.length} | {shape.length}):
      variants[f"jax blockwise-{block} whole batch"] = dict(attention="blockwise",
                                                          block_size=block, whole_batch=True)
  variants["jax xla-dpa"] = dict(core=JAX_CORES["xla-dpa"])
  variants["jax no-attention-core"] = dict(core=JAX_CORES["no-attention-core"])
  steps, rows = {}, {}
  for name, kw in variants.items():
    try:
      steps[name] = JaxStep(shape, kind, batch, arrays, **kw)
      rows[name] = {"xla_flops": steps[name].xla_flops, "compile_s": steps[name].compile_s}
    except Exception as e:  # noqa: BLE001 - an implementation being rewritten must not stop the run
      rows[name] = {"error": first_line(e)}
      log(f"  [{shape.name} breakdown] {name}: {rows[name]['error']}")
  host = steps["jax auto"].host_batches
  mlm_outputs = steps["jax auto"].mlm_outputs
  if torch is not None:
    for core in ("sdpa", "math", "none"):
      name = f"torch eager {core}"
      steps[name] = TorchStep(shape, kind, host, mlm_outputs, compile=False, attention_core=core)
      rows[name] = {}
  times = interleave(steps, args.breakdown_steps, 1)
  out = []
  for name, ts in times.items():
    median = statistics.median(ts)
    base = "jax auto" if name.startswith("jax") else "torch eager sdpa"
    r = dict(rows[name], shape=shape.name, kind=kind, batch=batch, variant=name,
             ms=1e3 * median, vs_base=paired_ratio(ts, times[base]), times_s=ts)
    out.append(r)
  for name, r in rows.items():
    if "error" in r:
      out.append(dict(r, shape=shape.name, kind=kind, batch=batch, variant=name))
  # The attention core's share and rate, from the removed-core ablation of each framework.
  for full, none in (("jax auto", "jax no-attention-core"), ("jax dense", "jax no-attention-core"),
                     ("torch eager sdpa", "torch eager none"),
                     ("torch eager math", "torch eager none")):
    if full in times and none in times:
      t_full, t_none = statistics.median(times[full]), statistics.median(times[none])
      r = next(x for x in out if x["variant"] == full)
      r["attention_share"] = (t_full - t_none) / t_full
      r["attention_gflops"] = (flops["attention"] / max(t_full - t_none, 1e-9) / 1e9
                               if t_full > t_none else None)
  for r in out:
    log(f"  [{shape.name} breakdown] {r['variant']}: " + (
        r["error"] if "error" in r else f"{r['ms']:.0f} ms/step ({r['vs_base']:.2f}x)"))
  del steps
  jax.clear_caches()
  return out


# ------------------------------------------------------------------------------------------ report


def _fmt(x, spec=",.0f", missing="–"):
  return missing if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def markdown(report: dict) -> str:
  m, peaks = report["machine"], report["matmul_peak_gflops"]
  lines = [
      f"# Train-step benchmark ({m['date']})", "",
      f"Machine: {m['cpu']}, {m['usable_cores']} usable cores, {m['memory_gb']} GB; "
      f"jax {m['versions'].get('jax')}, flax {m['versions'].get('flax')}, "
      f"torch {m['versions'].get('torch', 'absent')} ({m['torch_threads']} threads); "
      f"backend {m['jax_backend']}. Load average {report['load_before']:.1f} before, "
      f"{report['load_after']:.1f} after.",
      f"Matmul peak at the start (fp32, best of several n³): JAX {peaks['jax']:.0f} GFLOP/s, torch "
      f"{_fmt(peaks.get('torch'))} GFLOP/s. " + (
          "MFU divides each round's FLOP rate by the JAX matmul peak timed in the same round "
          "(median over rounds), so that changing load cancels out."
          if any("round_peak_gflops" in r for r in report["results"]) else
          f"MFU divides by {peaks['used']:.0f} GFLOP/s."),
      f"JAX compute dtype {report['settings'].get('dtype', 'float32')}"
      f"{' (--tiny: shrunk shapes, a dry run)' if report['settings'].get('tiny') else ''}. "
      f"Steps: median of {report['settings']['steps']} timed rounds after "
      f"{report['settings']['warmup']} warm-up round(s); one JAX, eager and compiled step per round.",
      "", "## Throughput", "",
      "| shape | step | L | batch (task) | JAX devices | params | JAX tok/s | eager tok/s "
      "| compiled tok/s | eager÷JAX | compiled÷JAX | JAX compile s | torch.compile s |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in report["results"]:
    lines.append(
        f"| {r['shape']} | {r['kind']} | {r['length']} | {r['batch']} ({r['full_batch']}) | "
        f"{r.get('jax_devices', 1)} | "
        f"{r['params']:,} | {_fmt(r.get('jax_tok_s'))} | {_fmt(r.get('torch_eager_tok_s'))} | "
        f"{_fmt(r.get('torch_compiled_tok_s'))} | {_fmt(r.get('torch_eager_speedup'), '.2f')} | "
        f"{_fmt(r.get('torch_compiled_speedup'), '.2f')} | {r['jax_compile_s']:.1f} | "
        f"{_fmt(r.get('torch_compiled_first_call_s'), '.1f')} |")
  lines += ["", "## FLOPs, MFU and input pipeline", "",
            "| shape | step | GFLOP/step XLA | GFLOP/step analytic (attention) | JAX MFU XLA | "
            "JAX MFU analytic | eager MFU | compiled MFU | JAX temp GB | input batches/s | "
            "step batches/s |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in report["results"]:
    a = r["analytic_flops"]
    lines.append(
        f"| {r['shape']} | {r['kind']} | {r['xla_flops'] / 1e9:.1f} | {a['total'] / 1e9:.1f} "
        f"({a['attention'] / 1e9:.1f}) | {_fmt(r.get('jax_mfu'), '.1%')} | "
        f"{_fmt(r.get('jax_mfu_analytic'), '.1%')} | {_fmt(r.get('torch_eager_mfu'), '.1%')} | "
        f"{_fmt(r.get('torch_compiled_mfu'), '.1%')} | {_fmt(r.get('jax_temp_gb'), '.2f')} | "
        f"{r['input_batches_s']:.0f} | {r['step_batches_s']:.2f} |")
  notes = [f"- {r['shape']}/{r['kind']}: {k}: {v}" for r in report["results"]
           for k, v in r.get("torch_notes", {}).items()]
  notes += [f"- {s['shape']}: skipped: {s['reason']}" for s in report["skipped"]]
  notes += list(dict.fromkeys(f"- {r['shape']}: {r['note']}" for r in report["results"]))
  if notes:
    lines += ["", "Notes:", *notes]
  if report["breakdown"]:
    lines += ["", "## Where the JAX step's time goes (pretraining step)", "",
              "| shape | batch | variant | ms/step | ÷ its baseline | attention share | "
              "attention GFLOP/s | XLA GFLOP/step |",
              "|---|---|---|---|---|---|---|---|"]
    for r in report["breakdown"]:
      if "error" in r:
        lines.append(f"| {r['shape']} | {r['batch']} | {r['variant']} | failed: {r['error']} "
                     f"| | | | |")
        continue
      lines.append(
          f"| {r['shape']} | {r['batch']} | {r['variant']} | {r['ms']:.0f} | "
          f"{r['vs_base']:.2f} | {_fmt(r.get('attention_share'), '.0%')} | "
          f"{_fmt(r.get('attention_gflops'), '.0f')} | "
          f"{_fmt(r.get('xla_flops') and r['xla_flops'] / 1e9, '.1f')} |")
  return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--shapes", default=",".join(DEFAULT_SHAPES),
                      help=f"comma-separated, from {sorted(SHAPES)}, or 'none'")
  parser.add_argument("--steps", type=int, default=10, help="timed rounds per shape and step kind")
  parser.add_argument("--warmup", type=int, default=1, help="untimed rounds after the first call")
  parser.add_argument("--batch", type=int, default=0,
                      help="global batch for every shape (default: the task's batch on "
                           "accelerators, the reduced CPU batch on CPU)")
  parser.add_argument("--out", default=os.path.join(HERE, "results"))
  parser.add_argument("--quick", action="store_true",
                      help="cpu shape, batch 4, 5 rounds, no torch.compile, no breakdown")
  parser.add_argument("--no-torch-compile", dest="torch_compile", action="store_false")
  parser.add_argument("--no-torch", dest="torch", action="store_false",
                      help="JAX only: no PyTorch steps, no torch matmul peak")
  parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                      help="the JAX model's compute dtype (model.dtype; parameters stay float32); "
                           "the PyTorch reference runs only with float32")
  parser.add_argument("--kinds", default=",".join(KINDS),
                      help=f"step kinds per shape, comma-separated, from {KINDS}")
  parser.add_argument("--tiny", action="store_true",
                      help=f"shrink every shape to {TINY_MODEL}, L <= {TINY_MAX_LENGTH}: a dry run "
                           f"of the pipeline in seconds, not a measurement")
  parser.add_argument("--breakdown", default="",
                      help="shapes whose pretraining step is ablated to find where time goes, "
                           "e.g. cpu,pathfinder (not part of the default run)")
  parser.add_argument("--breakdown-steps", type=int, default=5)
  parser.add_argument("--blocks", default="128,256",
                      help="blockwise block sizes in the breakdown")
  parser.add_argument("--budget-s", type=float, default=400.0,
                      help="skip a default shape predicted to take longer (explicit --shapes "
                           "always run)")
  parser.add_argument("--render", metavar="JSON",
                      help="print the tables of an earlier run's train_step.json and exit")
  parser.add_argument("--verbose", action="store_true")
  parser.add_argument("--cpu-devices", type=int, default=1,
                      help="CPU devices the JAX step is data-parallel over, as main.py's "
                           "--cpu_devices (default 1, main.py's default, so that the default run "
                           "measures what a run gets; -1: one per core, each shape using as many "
                           "as its batch divides into)")
  parser.add_argument("--cores", default="",
                      help="confine this process to these cores ('0', '0-1'), and torch to as many "
                           "threads, before either starts its thread pools: '--cores=0' is the "
                           "one-core mode (one study run per core, as the sweep runner places them)")
  parser.add_argument("--concurrent", type=int, default=1,
                      help="N > 1: run N copies of this benchmark at once, each confined to its own "
                           "cores as the sweep runner places N processes (default --cores: one "
                           "each), and tabulate every process's rows (train_step_concurrent.md)")
  args = parser.parse_args(argv)
  if args.concurrent > 1 and not args.render:
    return run_concurrent(args, argv if argv is not None else sys.argv[1:])
  if args.cores:
    cores = spt_platform.parse_cores(args.cores)
    spt_platform.pin_to_cores(cores)
    if torch is not None:
      torch.set_num_threads(len(cores))
  host_memory.retain_freed_memory()  # As main.py does, before JAX's backend starts its threads.
  spt_platform.use_cpu_devices(
      spt_platform.usable_cores() if args.cpu_devices < 0 else args.cpu_devices)
  if args.render:
    with open(args.render) as f:
      report = json.load(f)
    print(markdown(report) + f"\nWhole run: {report['wall_s']:.0f} s.")
    return report
  explicit = "--shapes" in (argv if argv is not None else sys.argv[1:]) or any(
      a.startswith("--shapes=") for a in (argv if argv is not None else sys.argv[1:]))
  if args.quick:
    args.shapes, args.steps, args.torch_compile, args.breakdown = "cpu", 5, False, ""
    args.batch = args.batch or 4
  args.blocks = [int(b) for b in args.blocks.split(",") if b]
  args.kinds = [k for k in args.kinds.split(",") if k]
  if not args.kinds or set(args.kinds) - set(KINDS):
    parser.error(f"--kinds {','.join(args.kinds)!r}: each must be one of {KINDS}")
  names = [s for s in args.shapes.split(",") if s and s != "none"]
  unknown = set(names) - set(SHAPES)
  if unknown:
    parser.error(f"unknown shapes {sorted(unknown)}; known: {sorted(SHAPES)}")
  if args.steps < 1:
    parser.error("--steps must be >= 1")
  log = lambda msg: print(msg, flush=True)

  started = time.time()
  if torch is not None and torch_device() == "cuda":
    # JAX multiplies float32 on GPUs with TF32 by default; torch does not. Same arithmetic for both.
    torch.set_float32_matmul_precision("high")
  report = {"machine": machine_info(), "load_before": os.getloadavg()[0],
            "settings": {k: v for k, v in vars(args).items()}, "results": [], "skipped": [],
            "breakdown": []}
  log(f"{report['machine']['cpu']}, {report['machine']['usable_cores']} cores, load "
      f"{report['load_before']:.1f}")
  on_cpu = jax.default_backend() == "cpu"
  n = probe_size(args.tiny)
  peaks = {"jax": jax_matmul_gflops(n)}
  if torch is not None and args.torch:
    peaks["torch"] = torch_reference.matmul_peak_gflops(n, device=torch_device())
  peaks["used"] = max(v for v in peaks.values())
  report["matmul_peak_gflops"] = peaks
  log("matmul peak: " + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peaks.items()))
  impls = ["jax"] + (["torch_eager"] + (["torch_compiled"] if args.torch_compile else [])
                     if torch is not None and args.torch and args.dtype == "float32" else [])

  shapes = {n: tiny_shape(s) if args.tiny else s for n, s in SHAPES.items()}
  for name in names:
    shape = shapes[name]
    batch = args.batch or (shape.cpu_batch if on_cpu else shape.batch)
    # A batch that does not divide over the devices runs on fewer of them (JaxStep), as in main.py.
    estimate = estimate_seconds(shape, batch, args.steps + args.warmup,
                                max(peaks["used"], NOMINAL_PEAK_GFLOPS), impls)
    if not explicit and args.budget_s and estimate > args.budget_s:
      reason = (f"predicted {estimate:.0f} s for {args.steps} rounds of {', '.join(impls)} at batch "
                f"{batch} (> --budget-s {args.budget_s:.0f}); run it alone with --shapes {name}")
      report["skipped"].append({"shape": name, "reason": reason, "predicted_s": estimate})
      log(f"[{name}] skipped: {reason}")
      continue
    log(f"[{name}] batch {batch} (task batch {shape.batch}), predicted ~{estimate:.0f} s")
    for kind in args.kinds:
      try:
        report["results"].append(bench_kind(shape, kind, batch, args, log))
        save(report, args.out, started)
      except Exception as e:  # noqa: BLE001 - e.g. out of memory at one shape: report, go on
        report["skipped"].append({"shape": f"{name}/{kind}", "reason": first_line(e)})
        log(f"[{name}/{kind}] failed: {first_line(e)}")
        if args.verbose:
          traceback.print_exc()
  for name in [s for s in args.breakdown.split(",") if s]:
    if name not in SHAPES:
      parser.error(f"unknown breakdown shape {name!r}")
    shape = shapes[name]
    batch = args.batch or (shape.cpu_batch if on_cpu else shape.batch)
    log(f"[{name}] breakdown at batch {batch}")
    try:
      report["breakdown"] += bench_breakdown(shape, batch, args, peaks["used"], log)
      save(report, args.out, started)
    except Exception as e:  # noqa: BLE001
      report["skipped"].append({"shape": f"{name}/breakdown", "reason": first_line(e)})
      log(f"[{name} breakdown] failed: {first_line(e)}")
      if args.verbose:
        traceback.print_exc()

  text = save(report, args.out, started)
  print(text)
  log(f"whole run {report['wall_s']:.0f} s; wrote {args.out}/train_step.{{md,json}}")
  return report


def run_concurrent(args, argv) -> dict:
  """`--concurrent N`: N copies of this script at once, the i-th confined to the sweep runner's i-th
  core slot (spt_jax.platform.core_slots) unless --cores names the cores to split, each writing
  its own <out>/process_<i>/; then one table of every process's rows."""
  import subprocess
  slots = spt_platform.core_slots(args.concurrent, spt_platform.parse_cores(args.cores)
                                  if args.cores else None)
  # Everything but --concurrent, --cores and --out is passed on as given.
  passed, skip = [], False
  for a in argv:
    if skip:
      skip = False
      continue
    name = a.split("=", 1)[0]
    if name in ("--concurrent", "--cores", "--out"):
      skip = "=" not in a
      continue
    passed.append(a)
  started = time.time()
  os.makedirs(args.out, exist_ok=True)
  children = []
  for i, slot in enumerate(slots):
    out = os.path.join(args.out, f"process_{i}")
    cmd = [sys.executable, os.path.abspath(__file__), *passed, f"--out={out}",
           f"--cores={','.join(map(str, slot))}"]
    log_file = open(os.path.join(args.out, f"process_{i}.log"), "w")
    children.append((i, slot, out, subprocess.Popen(cmd, stdout=log_file,
                                                     stderr=subprocess.STDOUT), log_file))
  print(f"{len(children)} processes on cores {slots}; logs in {args.out}/process_*.log", flush=True)
  failed = []
  for i, _, _, proc, log_file in children:
    if proc.wait():
      failed.append(i)
    log_file.close()
  reports = []
  for i, slot, out, _, _ in children:
    path = os.path.join(out, "train_step.json")
    if os.path.exists(path):
      with open(path) as f:
        reports.append((i, slot, json.load(f)))
  lines = [f"# Train-step benchmark, {len(slots)} processes at once "
           f"({datetime.datetime.now().isoformat(timespec='seconds')})", "",
           "Each process confined to its cores with as many torch threads; JAX and eager steps "
           "interleaved within each process. Per-process tables: process_<i>/train_step.md.", "",
           "| shape | step | process | cores | JAX tok/s | eager tok/s | eager÷JAX | JAX MFU |",
           "|---|---|---|---|---|---|---|---|"]
  for i, slot, report in reports:
    for r in report["results"]:
      lines.append(f"| {r['shape']} | {r['kind']} | {i} | {','.join(map(str, slot))} | "
                   f"{_fmt(r.get('jax_tok_s'))} | {_fmt(r.get('torch_eager_tok_s'))} | "
                   f"{_fmt(r.get('torch_eager_speedup'), '.2f')} | "
                   f"{_fmt(r.get('jax_mfu_analytic'), '.1%')} |")
  if failed:
    lines += ["", f"Failed processes (see their logs): {failed}"]
  text = "\n".join(lines) + f"\n\nWhole run: {time.time() - started:.0f} s.\n"
  with open(os.path.join(args.out, "train_step_concurrent.md"), "w") as f:
    f.write(text)
  print(text)
  if failed:
    raise SystemExit(f"{len(failed)} of {len(slots)} processes failed: {failed}")
  return {"processes": [{"index": i, "cores": slot, "report": r} for i, slot, r in reports]}


def save(report: dict, out: str, started: float) -> str:
  """Writes the tables and JSON so far: a run cut short still leaves what it measured."""
  report["load_after"] = os.getloadavg()[0]
  report["wall_s"] = time.time() - started
  text = markdown(report)
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, "train_step.md"), "w") as f:
    f.write(text + f"\nWhole run: {report['wall_s']:.0f} s.\n")
  with open(os.path.join(out, "train_step.json"), "w") as f:
    json.dump(report, f, indent=1, default=str)
  return text


if __name__ == "__main__":
  main()
