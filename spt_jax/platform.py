"""Everything spt-jax does differently by platform, for speed or safety; the rest of the code is the
same on every backend and does not ask which one it runs on.

  process   `configure_process` (main.py, once, before anything touches a device): the cores the
            process may run on (`pin_to_cores`), the size of XLA:CPU's thread pool, which sets
            float32 rounding (`set_cpu_threads`), the host heap that keeps XLA:CPU's step
            temporaries mapped (spt_jax/host_memory.py), and the CPU backend's split into per-core
            devices (an opt-in: `OPT_IN_RISK`); `core_slots`, the sweep runner's placement of
            concurrent runs on disjoint cores.
  steps     the train step's XLA options (`step_compiler_options`), its rows in chunks on the CPU
            (`batch_chunks`), the heap fitted to the compiled
            step (`fit_heap_to_step`), and where a step's memory comes from (`shares_host_memory`,
            `available_memory`): the trainer and its preflight checks.
  kernels   what the models run per backend: nn.Dense's kernel gradient in YNNPACK-friendly form on
            XLA:CPU (`dense_dot_general`), a loss's global count before the forward pass
            (`count_before_forward`: for per-core CPU devices), the exact attention that `attention='auto'` picks and why
            (`choose_auto_attention`: cuDNN on a CUDA GPU where it supports the model, blockwise
            from moderate lengths on the CPU, dense otherwise), blockwise's loop over the batch on
            the CPU (`sequence_chunk`), and cuDNN's requirement of a CUDA GPU.
            Each takes the backend's name as an argument (default: this process's,
            `backend_name`), so that the choices can be tested on any machine.

Why each choice is made, with the measurements behind it: benchmarks/README.md.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Mapping

import jax
from absl import logging
from jax import lax

from spt_jax import distributed, host_memory


# ---------------------------------------------------------------------------------------- Process
def configure_process(config, cpu_devices: int, retain_freed_memory: bool,
                      cores: str = "", cpu_threads: int = 0) -> int:
  """main.py's platform set-up, before anything touches a device: the process confined to `cores`
  (`parse_cores`; '' leaves it alone), XLA:CPU's thread pool of `cpu_threads` threads (0: one per
  core it may use; `set_cpu_threads`), the retained heap if asked and the CPU backend will run
  (`expects_cpu_backend`; before the backend starts its threads: a thread that has allocated keeps
  its own arena), then `cpu_devices` CPU devices (`split_cpu_into_devices`); returns the device
  count it set (1: left alone)."""
  if cores:
    pin_to_cores(parse_cores(cores))
  if cpu_threads:
    set_cpu_threads(cpu_threads)
  if retain_freed_memory and expects_cpu_backend():
    host_memory.retain_freed_memory()
  return split_cpu_into_devices(config, cpu_devices)


def expects_cpu_backend(platforms: str | None = None) -> bool:
  """Whether JAX's default backend will be the CPU, decided without starting a backend (starting
  one before jax.distributed.initialize would hide the other hosts' devices): the first of
  `platforms` (default: JAX_PLATFORMS, jax.config.jax_platforms) when set, else whether no
  accelerator plugin (a jax_plugins entry point, libtpu) is installed. An installed plugin without
  its hardware falls back to the CPU: the heap then stays glibc's, slower, never wrong."""
  import importlib.metadata
  import importlib.util
  platforms = (jax.config.jax_platforms if platforms is None else platforms) or ""
  if platforms.strip():
    return platforms.split(",")[0].strip() == "cpu"
  return (not list(importlib.metadata.entry_points(group="jax_plugins"))
          and importlib.util.find_spec("libtpu") is None)


def usable_cores() -> int:
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def parse_cores(text: str) -> tuple[int, ...]:
  """'0', '0,1', '2-5' or '0-1,4' → the sorted core ids; each must be one this process may use."""
  cores = set()
  for part in filter(None, (p.strip() for p in text.split(","))):
    low, dash, high = part.partition("-")
    try:
      ids = range(int(low), int(high) + 1) if dash else (int(low),)
    except ValueError:
      raise ValueError(f"--cores={text!r}: {part!r} is not a core id or a range like 0-3.") from None
    if not ids:
      raise ValueError(f"--cores={text!r}: the range {part!r} is empty.")
    cores.update(ids)
  allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
  if not cores:
    raise ValueError(f"--cores={text!r} names no core.")
  if allowed is not None and not cores <= allowed:
    raise ValueError(f"--cores={text!r}: core(s) {sorted(cores - allowed)} are not among the "
                     f"cores this process may use, {sorted(allowed)}.")
  return tuple(sorted(cores))


def pin_to_cores(cores) -> None:
  """Confines this process to `cores`: every thread it has (a thread's affinity is its own on Linux;
  numpy's BLAS starts its pool at import) and, by inheritance, every thread started later. Must run
  before the backend starts: XLA:CPU and Eigen size their thread pools by the cores the process may
  use, so that N pinned processes on N cores run N pools of one thread, not N pools of N threads
  contending for the same cores. Without sched_setaffinity (macOS) a no-op with a warning."""
  if not hasattr(os, "sched_setaffinity"):
    logging.warning("--cores is ignored: this OS has no sched_setaffinity.")
    return
  cores = set(cores)
  for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ["0"]:
    try:
      os.sched_setaffinity(int(tid), cores)
    except ProcessLookupError:  # a thread that ended meanwhile
      pass
  logging.info("Confined to core(s) %s.", ",".join(map(str, sorted(cores))))


# Read by XLA:CPU once, when the backend starts (pjrt/cpu: the intra-op pool's size; without it, the
# cores the process may use).
CPU_THREADS_ENV = "PJRT_NPROC"


def set_cpu_threads(threads: int, environ=os.environ) -> None:
  """Gives XLA:CPU's thread pool `threads` threads, whatever cores the process runs on. Must run
  before the backend starts. XLA:CPU (its YNNPACK reductions) splits work by the pool's size, not
  by the cores, so float32 results depend on this number alone: a process confined to one core
  with 2 threads computes bit for bit what an unconfined one on 2 cores does, at some cost in
  speed (the threads take turns on the core; benchmarks/README.md, "Sweep processes on their own
  cores")."""
  if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
    raise ValueError(f"--cpu_threads={threads!r}: must be a positive number of threads "
                     "(0 or unset: one per core the process may use).")
  environ[CPU_THREADS_ENV] = str(threads)


def cpu_threads(environ: Mapping[str, str] = os.environ) -> int:
  """The size of XLA:CPU's thread pool in this process: `set_cpu_threads`'s, else one per core the
  process may use."""
  value = environ.get(CPU_THREADS_ENV, "").strip()
  return int(value) if value.isdigit() and int(value) > 0 else usable_cores()


def core_slots(processes: int, cores=None) -> list[tuple[int, ...]]:
  """`processes` disjoint sets of `cores` (default: the ones this process may use), all of one
  size: where concurrent runs are placed so that each has cores of its own. One size, because
  XLA:CPU splits some operations by its thread count, which rounds float32 differently: a run
  resumed in another slot then continues bit-identically. Cores left over (7 cores for 2 runs: 3
  each) stay unused. With more processes than cores, the cores are shared round-robin."""
  if cores is None:
    cores = (os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity")
             else range(os.cpu_count() or 1))
  cores = sorted(cores)
  if processes <= 0:
    raise ValueError(f"core_slots: processes must be positive, got {processes}.")
  if processes >= len(cores):
    return [(cores[i % len(cores)],) for i in range(processes)]
  size = len(cores) // processes
  return [tuple(cores[i * size:(i + 1) * size]) for i in range(processes)]


def cpu_device_count(batch_sizes, cores: int) -> int:
  """The most CPU devices, at most `cores`, that divide every batch in `batch_sizes`."""
  return max(d for d in range(1, max(1, cores) + 1) if all(b % d == 0 for b in batch_sizes))


# What opting in to several CPU devices risks, in main.py's help text and in the warning logged when
# a run does (benchmarks/README.md, "CPU default under load").
OPT_IN_RISK = (
    "per-core CPU devices run the data-parallel step with an in-process all-reduce that XLA aborts "
    "after 40 s of waiting (rendezvous.cc: 'Termination timeout for all reduce ... Exiting to ensure "
    "a consistent program state') when other processes load the cores: 6 of 10 1000-step "
    "configs/synthetic_scratch.py runs died so beside 3 busy processes on 2 cores, against 0 of 15 "
    "with one device. The gain is on idle cores only (1.2-1.6x on 2 cores; none measurable under "
    "load; benchmarks/README.md). With other work on the machine keep the default (--cpu_devices=1, "
    "and as many processes as --cpu_processes says, which have no such timeout). "
    "A resumed run must use the same device count to be bit-identical.")
_warned = False


def phase_batches(config) -> list[int]:
  """Every phase's train and evaluation batch size: what a data-parallel split must divide."""
  names = [n.strip() for n in config.phases.split(",") if n.strip()]
  return [config[n][key] for n in names for key in ("batch_size", "eval_batch_size")
          if config[n][key] > 0]


def cpu_process_count(config, requested: int, cores: str = "",
                      environ: Mapping[str, str] = os.environ) -> int:
  """How many processes a CPU run on this machine becomes (main.py --cpu_processes; 1: it runs in
  this process): `requested`, or with `requested` < 0 one per core, never more than the cores of
  `cores` (default: the cores this process may use) and fewer where the phases' batches do not
  divide. The processes split the cores into equal sets (core_slots).

  Each process has one device on its own core, and they sum their gradients through gloo on
  localhost as one flat buffer (train.flat_summed_grads): on idle cores faster than one device
  on all of them, and under load nothing times out: unlike the per-core devices of one process
  (OPT_IN_RISK), no collective here has a 40 s abort. 1 inside a multi-process job, off the CPU
  backend, without bash (the launcher's shell), or where `requested` is 0 or 1."""
  if (requested in (0, 1) or distributed.initialize_kwargs(environ) is not None
      or not expects_cpu_backend() or shutil.which("bash") is None):  # launch/local.sh is bash
    return 1
  available = len(parse_cores(cores)) if cores else usable_cores()
  return cpu_device_count(phase_batches(config),
                          available if requested < 0 else min(requested, available))


def split_cpu_into_devices(config, requested: int,
                           environ: Mapping[str, str] = os.environ) -> int:
  """Makes a single-process run see one CPU device per core (`requested` < 0) or `requested` ones,
  fewer if the phases' batches do not divide; returns the count (1: left alone).

  main.py's default is 1 (--cpu_devices=1): one device per process, the process count set apart
  (cpu_process_count), which holds however loaded the machine is. Several devices are an opt-in: XLA:CPU
  runs one program on a shared thread pool that parallelises large ops only, so on idle cores a
  data-parallel step over per-core devices is faster (benchmarks/README.md), but the devices share
  that pool and block in an in-process all-reduce, which XLA aborts after 40 s when the cores are
  oversubscribed (OPT_IN_RISK; logged as a warning, once per process, when a run opts in). Only the
  CPU backend's device count changes: on a GPU or TPU host the accelerators stay the default
  devices. Multi-process launches keep one device per process. Must run before anything touches a
  device."""
  if distributed.initialize_kwargs(environ) is not None or requested in (0, 1):
    return 1  # Multi-process, or asked not to.
  count = cpu_device_count(phase_batches(config), usable_cores() if requested < 0 else requested)
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


# ---------------------------------------------------------------------------------------- Steps
def step_compiler_options(remat: str) -> dict[str, str]:
  """XLA options for the train step of a model with `remat`. jax.checkpoint keeps a recomputation
  apart from the forward pass with optimization barriers; XLA:CPU expands them early (its
  `cse_barrier_expander` pass), after which CSE merges the two and the step keeps every layer's
  activations as without remat. Skipping that pass keeps the barriers (other backends keep them)."""
  if remat == "none" or jax.default_backend() != "cpu":
    return {}
  return {"xla_disable_hlo_passes": "cse_barrier_expander"}


def fit_heap_to_step(temp_bytes: int, devices: int) -> None:
  """Called once the train step is compiled: on the CPU backend with the retained heap in effect,
  glibc's defaults come back if keeping `devices` programs' `temp_bytes` of temporaries could
  exhaust the host's memory (host_memory.release_if_too_costly); on any other backend they come
  back regardless (`expects_cpu_backend` guessed wrong)."""
  if host_memory.retained() and jax.default_backend() == "cpu":
    host_memory.release_if_too_costly(temp_bytes, devices=devices)
  elif host_memory.retained():
    host_memory.release()


def processes_sharing_this_host(environ: Mapping[str, str] = os.environ) -> int:
  """How many processes of this job run on this machine and share its memory: all of them when the
  coordinator is on the loopback address (launch/local.sh, main.py --cpu_processes), else 1 (one
  process per host, as on a pod or under SLURM)."""
  host = environ.get(distributed.COORDINATOR, "").rpartition(":")[0]
  local = host.startswith("127.") or host in ("localhost", "[::1]", "::1")
  return jax.process_count() if local else 1


def shares_host_memory(devices) -> bool:
  """Whether `devices` are a CPU host's, which share its memory, rather than accelerators that have
  their own each."""
  return devices[0].platform == "cpu"


def available_memory(devices) -> tuple[int | None, str]:
  """(Bytes free for the step, what they are): host memory on the CPU backend, else the least free
  memory of `devices`; None where it is unknown. Tests replace this function."""
  if shares_host_memory(devices):
    return host_memory.available_memory_bytes(), "host memory (MemAvailable)"
  stats = [d.memory_stats() or {} for d in devices]
  if not all("bytes_limit" in s for s in stats):
    return None, f"{devices[0].platform} memory"
  free = min(s["bytes_limit"] - s.get("bytes_in_use", 0) for s in stats)
  return free, f"{devices[0].platform} memory (on the fullest device)"


def flat_gradient_all_reduce(mesh) -> bool:
  """Whether the train step should sum its gradients as one flat buffer (train.flat_summed_grads)
  on `mesh`: on CPU devices of several processes. There XLA:CPU runs the step's combined gradient
  all-reduce over gloo as one collective per parameter array, a few ms each, and one flat buffer
  costs one of them (benchmarks/README.md, "One process per core"). Elsewhere XLA's own combined
  all-reduce is already one transfer, and within one process the per-array calls are cheap."""
  devices = mesh.devices.flat
  return (all(d.platform == "cpu" for d in devices)
          and len({d.process_index for d in mesh.devices.flat}) > 1)


# The train step on a CPU device takes its rows in chunks of at least this many tokens and
# CPU_CHUNK_MIN_ROWS rows, one chunk after another (train.flat_summed_grads): each chunk's activations
# ([tokens, d_model] float32 per layer) then stay in the cores' caches through forward and backward,
# where the whole batch's stream through memory at every elementwise pass (benchmarks/README.md,
# "The batch in chunks"). Measured with one and with two cores per device.
CPU_CHUNK_MIN_TOKENS = 512
CPU_CHUNK_MIN_ROWS = 2


def batch_chunks(rows: int, tokens_per_row: int, backend: str | None = None) -> int:
  """How many chunks a device's `rows` rows of `tokens_per_row` tokens go through the train step
  in, one after another (1: all at once): on the CPU, chunks of the fewest rows that divide `rows`
  and hold CPU_CHUNK_MIN_TOKENS tokens and CPU_CHUNK_MIN_ROWS rows; elsewhere 1 (the batch is what
  fills an accelerator). A chunk's attention then runs at once where its scores fit the cache
  budget of `sequence_chunk`."""
  if (backend or backend_name()) != "cpu":
    return 1
  least = max(CPU_CHUNK_MIN_ROWS, -(-CPU_CHUNK_MIN_TOKENS // max(1, tokens_per_row)))
  size = min((d for d in range(least, rows + 1) if rows % d == 0), default=rows)
  return rows // size


# ---------------------------------------------------------------------------------------- Kernels
def count_before_forward(count, inputs):
  """(count, inputs) with `count` computed before anything that reads the returned `inputs`: every
  objective passes its loss's global denominator and the model's inputs through it.

  Under data parallelism a count over the global batch (the loss's denominator) is an all-reduce, a
  rendezvous of all devices. Tying the forward pass to it makes every device meet there at the start
  of the step, instead of one device's thread blocking in it mid-step on backends that run it as soon
  as its operands are ready (XLA:CPU's per-core devices; benchmarks/README.md, "count before
  forward"). Elsewhere the barrier changes no value and no schedule worth measuring.
  """
  return jax.lax.optimization_barrier((count, inputs))


# nn.Dense's kernel gradient xᵀ·g contracts the token axis, the leading (major) axis of both operands.
# XLA:CPU hands a dot to YNNPACK only as row-major [M, K]·[K, N], so by default it runs this one as an
# Eigen dot with transposed operands, the slowest matmul of the train step; a transposed copy of the
# narrower operand plus a YNNPACK dot is faster (benchmarks/README.md, "Dense kernel gradients in
# YNNPACK"). `kernel_grad_dot_general` is a drop-in `dot_general` for nn.Dense that spells the kernel
# gradient that way; the forward pass and the input gradient are unchanged.
def _matmul(x, kernel):
  return lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())))


@jax.custom_vjp
def _dense_matmul(x, kernel):
  return _matmul(x, kernel)


def _dense_matmul_fwd(x, kernel):
  return _matmul(x, kernel), (x, kernel)


def _dense_matmul_bwd(residuals, g):
  x, kernel = residuals
  dx = lax.dot_general(g, kernel, (((g.ndim - 1,), (1,)), ((), ())))
  x2, g2 = x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1])
  # The barriers stop XLA's transpose folding from merging each explicit transpose back into the dot
  # (which would restore the Eigen dot); XLA:CPU drops them before fusion, so they cost nothing. Which
  # operand gets transposed: the narrower one, the copy being the cost; of two equally wide ones, the
  # gradient. x is often recomputed rather than kept (an activation, a LayerNorm), and XLA fuses that
  # recomputation into the transposed copy, where it runs in the copy's strided order; g is already
  # in memory (dx reads it too), so its transpose is a plain copy.
  if x2.shape[1] < g2.shape[1]:
    d_kernel = lax.optimization_barrier(x2.T) @ g2
  else:
    d_kernel = lax.optimization_barrier(lax.optimization_barrier(g2.T) @ x2).T
  return dx, d_kernel.astype(kernel.dtype)


_dense_matmul.defvjp(_dense_matmul_fwd, _dense_matmul_bwd)


def kernel_grad_dot_general(x, kernel, dimension_numbers, precision=None,
                            preferred_element_type=None):
  """`lax.dot_general` as nn.Dense calls it (x's last axis against the kernel's first), with the
  kernel gradient computed in YNNPACK-friendly form. Anything else is refused, not silently changed."""
  (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
  if (tuple(lhs_contract) != (x.ndim - 1,) or tuple(rhs_contract) != (0,) or lhs_batch or rhs_batch
      or kernel.ndim != 2 or precision is not None or preferred_element_type is not None):
    raise ValueError(f"kernel_grad_dot_general handles nn.Dense's x @ kernel only, got dimension "
                     f"numbers {dimension_numbers} for shapes {x.shape} and {kernel.shape}, "
                     f"precision={precision}, preferred_element_type={preferred_element_type}.")
  return _dense_matmul(x, kernel)


def dense_dot_general(backend: str | None = None):
  """The `dot_general` Dense layers use on `backend` (default: this one): ours on CPU; elsewhere
  (cuBLAS, TPU) the transposed operands are free and an explicit transpose would be a pure extra
  copy."""
  return kernel_grad_dot_general if (backend or backend_name()) == "cpu" else None


def backend_name() -> str:
  """jax.default_backend(), with a GPU named by its runtime: 'cuda' or 'rocm'. Only CUDA has cuDNN,
  and JAX calls both 'gpu'."""
  backend = jax.default_backend()
  if backend != "gpu":
    return backend
  from jax.extend import backend as xla_backend
  version = str(getattr(xla_backend.get_backend(), "platform_version", "")).lower()
  return "rocm" if "rocm" in version else "cuda"


# Names a CUDA GPU goes by: ours, and JAX's own ('gpu', as jax.default_backend() says).
CUDA_BACKENDS = ("cuda", "gpu")

# attention='auto' on the CPU backend: XLA's dense attention makes several passes over the L×L
# scores, and blockwise attention's forward + backward beats it from L=128 on; one block up to a
# length that depends on the cores each device has, beyond that blocks of 128 (benchmarks/README.md,
# "Findings behind the code's choices", "Attention"). On one core a whole sequence as one block
# pays off up to 256 tokens; with several cores per device the larger tiles of one block split
# better over the cores, up to 1,024 tokens.
AUTO_CPU_MIN_LENGTH = 128
AUTO_CPU_ONE_BLOCK_MAX = 256
AUTO_CPU_THREADED_ONE_BLOCK_MAX = 1024
AUTO_CPU_BLOCK = 128
# Blockwise attention on the CPU goes through the batch one sequence per device at a time
# (`attention_sequence_chunk`) while one sequence's scores, heads × L² float32, take at most this
# many bytes: each step's tiles then stay in the core's cache instead of streaming the whole batch's
# through memory. With several cores per device a step's small tiles split poorly over them, and
# the loop pays only while a sequence's scores fit one core's L2-sized budget; longer sequences
# already loop over many block pairs each, and the batch at once measured faster there.
CPU_SEQUENCE_CHUNK_MAX_SCORE_BYTES = 4 << 20
CPU_THREADED_SEQUENCE_CHUNK_MAX_SCORE_BYTES = 1 << 20


def cpu_cores_per_device(devices: int | None = None) -> int:
  """The cores each of `devices` CPU devices (default: this process's local devices) computes
  with: XLA:CPU's threads (`cpu_threads`: the cores this process may use unless set apart),
  shared out (at least 1). Decides the CPU attention's tiling, so that, like XLA's own splits, it
  follows the thread count and not the placement."""
  return max(1, cpu_threads() // (devices or jax.local_device_count()))


# What cuDNN's fused attention (jax.nn.dot_product_attention(implementation='cudnn'), jax 0.10's
# checks in jax/_src/cudnn/fused_attention_stablehlo.py) runs: float16/bfloat16 operands only
# (models/attention.py would cast float32 ones to bfloat16, a silent loss of precision, so 'auto'
# does not go there), a head dimension that is a multiple of 8 and at most 128 (256 from Hopper on;
# 128 holds on every CUDA GPU). Of spt-jax's masks it takes key padding as per-example lengths
# (SequenceModel pads at the end, which is what lengths describe) and the causal mask natively;
# a rotation of q and k (RoPE) acts before any implementation. Not attention dropout (only dense has
# it), and a position bias on the scores (ALiBi's, a learned one) only as an explicit [1, H, L, L]
# bias operand (quadratic memory, even lengths in training): the encodings whose `fused_kernel` flag
# is off (spt_jax/models/positions.py).
CUDNN_DTYPES = ("bfloat16", "float16")
CUDNN_MAX_HEAD_DIM = 128


@dataclasses.dataclass(frozen=True)
class AttentionChoice:
  """What attention='auto' runs for a model: the implementation, its block size (None: not
  blockwise) and why, in words (logged)."""
  implementation: str
  block_size: int | None
  reason: str


def cudnn_unsupported(dtype: str, head_dim: int | None, alibi: bool = False, *,
                      position=None) -> str | None:
  """Why cuDNN's fused attention cannot run a model exactly as configured, or None if it can
  (`CUDNN_DTYPES` above: dropout is checked by the caller). `position`: the model's position
  encoding (models/positions.py; this module only reads its flags); `alibi=True` says the same of
  an ALiBi model for a caller that has no encoding at hand."""
  if dtype not in CUDNN_DTYPES:
    return f"cuDNN runs {'/'.join(CUDNN_DTYPES)} only and the compute dtype is {dtype}"
  if head_dim is None:
    return "the head dimension is not known"
  if head_dim % 8 or head_dim > CUDNN_MAX_HEAD_DIM:
    return (f"cuDNN needs a head dimension that is a multiple of 8 and at most "
            f"{CUDNN_MAX_HEAD_DIM}, and it is {head_dim}")
  if position is not None and not position.fused_kernel:
    return f"{position.title} would reach cuDNN as an L×L bias array, not a mask"
  if alibi:
    return "ALiBi would reach cuDNN as an L×L bias array, not a mask"
  return None


def choose_auto_attention(length: int, dropout: bool, *, dtype: str = "float32",
                          head_dim: int | None = None, alibi: bool = False, position=None,
                          backend: str | None = None,
                          cores_per_device: int | None = None) -> AttentionChoice:
  """What `implementation='auto'` runs for a model on `backend` (default: this process's,
  `backend_name`): on a CUDA GPU cuDNN's fused kernel where it supports the case, else dense; on
  the CPU blockwise from AUTO_CPU_MIN_LENGTH tokens; dense whenever attention dropout is active
  (only dense has it) and on every other backend (XLA fuses it there; a step that does not fit is
  stopped before it runs with attention='blockwise' among the remedies, spt_jax/preflight.py).
  `alibi`, `position`: as in `cudnn_unsupported`. `cores_per_device` (CPU; default:
  `cpu_cores_per_device`) sets the longest sequence taken as one block."""
  backend = backend or backend_name()
  if dropout:
    return AttentionChoice("dense", None, "attention dropout is active and only dense has it")
  if backend in CUDA_BACKENDS:
    why_not = cudnn_unsupported(dtype, head_dim, alibi, position=position)
    if why_not is None:
      return AttentionChoice("cudnn", None, f"CUDA GPU, {dtype}, head dimension {head_dim}: "
                                            f"cuDNN's fused kernel takes its key padding and "
                                            f"causal mask")
    return AttentionChoice("dense", None, f"CUDA GPU, but {why_not}")
  if backend == "cpu" and length >= AUTO_CPU_MIN_LENGTH:
    cores = cores_per_device or cpu_cores_per_device()
    one_block_max = AUTO_CPU_ONE_BLOCK_MAX if cores == 1 else AUTO_CPU_THREADED_ONE_BLOCK_MAX
    block = length if length <= one_block_max else AUTO_CPU_BLOCK
    return AttentionChoice("blockwise", block,
                           f"CPU and L={length} >= {AUTO_CPU_MIN_LENGTH}: blockwise is faster"
                           f" ({'one block' if block == length else f'blocks of {block}'} with "
                           f"{cores} core{'s' if cores > 1 else ''} per device)")
  if backend == "cpu":
    return AttentionChoice("dense", None, f"CPU and L={length} < {AUTO_CPU_MIN_LENGTH}")
  return AttentionChoice("dense", None, f"{backend}: XLA's dense attention")


def resolve_auto_attention(length: int, dropout: bool, **model) -> tuple[str, int | None]:
  """(implementation, block size or None) of `choose_auto_attention` (same arguments)."""
  choice = choose_auto_attention(length, dropout, **model)
  return choice.implementation, choice.block_size


def auto_attention(model_config, backend: str | None = None) -> AttentionChoice:
  """What attention='auto' runs for `model_config` (a models.transformer.ModelConfig) on `backend`
  (default: this process's): `choose_auto_attention` for the encoder's length and the model's
  dropout, dtype, head dimension and position encoding. `specialise` and the preflight's remedies
  (spt_jax/preflight.py) both ask this, so they cannot disagree."""
  return choose_auto_attention(
      model_config.encoder_length, model_config.dropout_rate > 0, dtype=model_config.dtype,
      head_dim=model_config.d_model // model_config.num_heads, position=model_config.encoding,
      backend=backend)


_logged_choices: set[str] = set()


def specialise(model_config, backend: str | None = None):
  """`model_config` (a models.transformer.ModelConfig) as `backend` (default: this process's) runs
  it: the Dense layers' matmul chosen, attention='auto' resolved for the encoder's length (the
  choice and its reason logged once per distinct choice, though the trainer specialises each phase
  more than once), attention='cudnn' checked to have a CUDA GPU. The model itself never asks the
  backend."""
  backend = backend or backend_name()
  changes = {"dot_general": dense_dot_general(backend)}
  if model_config.attention == "auto":
    choice = auto_attention(model_config, backend)
    message = (f"attention='auto' runs {choice.implementation!r}"
               f"{f' (block {choice.block_size})' if choice.block_size else ''} for "
               f"L={model_config.encoder_length}: {choice.reason}.")
    if message not in _logged_choices:
      _logged_choices.add(message)
      logging.info("%s", message)
    changes.update(attention=choice.implementation,
                   attention_block_size=choice.block_size or model_config.attention_block_size)
  elif model_config.attention == "cudnn":
    check_cudnn_backend(backend)
  if changes.get("attention", model_config.attention) == "blockwise":
    changes["attention_sequence_chunk"] = sequence_chunk(
        model_config.encoder_length, model_config.num_heads, backend)
  return dataclasses.replace(model_config, **changes)


def sequence_chunk(length: int, num_heads: int, backend: str | None = None,
                   devices: int | None = None, cores_per_device: int | None = None,
                   rows: int | None = None) -> int:
  """How many sequences blockwise attention takes per step of its loop over the batch
  (models/attention.py, `sequence_chunk`; 0: the whole batch at once): on the CPU one per device
  (default: all of JAX's, over which the trainer's mesh splits the batch; 1 where each device's
  rows go through the model on their own, train.flat_summed_grads) while a sequence's scores
  fit in CPU_SEQUENCE_CHUNK_MAX_SCORE_BYTES (one core per device) or
  CPU_THREADED_SEQUENCE_CHUNK_MAX_SCORE_BYTES (more; default: `cpu_cores_per_device` of the local
  devices); elsewhere 0, the batch being what fills an accelerator. Where the model is known to
  see `rows` sequences (a device's chunk of rows, train.flat_summed_grads) whose scores fit that
  budget together, 0: they are already a cache-sized tile, and the loop would only add its own
  overhead."""
  if (backend or backend_name()) != "cpu":
    return 0
  cores = cores_per_device or cpu_cores_per_device()
  limit = (CPU_SEQUENCE_CHUNK_MAX_SCORE_BYTES if cores == 1
           else CPU_THREADED_SEQUENCE_CHUNK_MAX_SCORE_BYTES)
  scores = num_heads * length * length * 4
  if scores > limit or (rows is not None and rows * scores <= limit):
    return 0
  return devices or jax.device_count()


def check_cudnn_backend(backend: str | None = None) -> None:
  """attention='cudnn' runs on a CUDA GPU only: elsewhere, an error naming the alternative."""
  backend = backend or backend_name()
  if backend not in CUDA_BACKENDS:
    raise ValueError(
        f"attention='cudnn' needs a CUDA GPU, but JAX's backend is {backend!r}; use "
        f"attention='blockwise' for exact attention in linear memory on {backend}.")
