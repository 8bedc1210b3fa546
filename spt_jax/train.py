"""One training phase (self-pretraining or fine-tuning), from config to results.

Read top to bottom: data → model and objective → parameters (fresh, handed off, or resumed) →
compiled steps → loop (log, evaluate, checkpoint) → final test of the checkpoint chosen on validation.
Every step is a pure jitted function of (state, batch); randomness is `fold_in(phase_rng, step)` and the
data order a function of (seed, step), so a resumed run is bit-identical to an uninterrupted one.
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
import zlib
from collections.abc import Callable
from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tqdm
from absl import logging
from jax.flatten_util import ravel_pytree
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from spt_jax import (checkpoints, distributed, faults, flops, init_from, objectives, optim,
                     param_groups, platform, preflight, provenance, stopping, tree)
from spt_jax.data import pipeline
from spt_jax.data.tasks import TaskData
from spt_jax.metric_writers import MetricWriter, workdir_path, write_json, write_text
from spt_jax.models import transformer


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  opt_state: Any


def model_config(model_section, task: TaskData) -> transformer.ModelConfig:
  """The model of `config.model` on `task`'s data, as this backend runs it best."""
  return platform.specialise(transformer.from_section(model_section, task))


def make_objective(config, name: str, task: TaskData) -> objectives.Objective:
  """Phase `name`'s objective (which owns its model) for `task`."""
  return objectives.build(config, name, task, model_config(config.model, task))


def example_inputs(splits) -> jax.Array:
  """A one-example batch of zeros with the data's input shape, to initialise parameters from."""
  return jnp.zeros((1,) + splits["train"]["inputs"].shape[1:], jnp.int32)


def abstract_params(config, name: str, task: TaskData):
  """Phase `name`'s parameter shapes, traced (nothing computed): for the checks before training."""
  objective = make_objective(config, name, task)
  dummy = example_inputs(objective.splits(task))
  return jax.eval_shape(lambda rng: objective.init_params(rng, dummy), jax.random.PRNGKey(0))


def validation_metric_names(config, name: str, task: TaskData, params) -> set[str]:
  """The metrics phase `name`'s validation reports, traced on one example (nothing computed)."""
  objective = make_objective(config, name, task)
  val = objective.splits(task)["val"]
  batch = next(iter(pipeline.eval_batches(val, 1)))
  summed = jax.eval_shape(lambda p, b: objective.eval_sums(
      p, dict(b, inputs=b["inputs"].astype(jnp.int32)), jax.random.PRNGKey(0)), params, batch)
  ones = jax.tree.map(lambda s: np.ones(s.shape, s.dtype), summed)
  return set(objective.summarize(ones))


def check_phase_metrics(config, name: str, task: TaskData, params) -> None:
  """`select_on` and the plateau rule's metric are metrics phase `name` reports (before training)."""
  cfg = config[name]
  if cfg.select_on or cfg.stop_on_plateau.metric:
    stopping.check_metrics(cfg, name, make_objective(config, name, task),
                           validation_metric_names(config, name, task, params))


def phase_rng(seed: int, phase: str) -> jax.Array:
  # Keyed by the phase's name, not its position, so a from-scratch fine-tune and the fine-tune of an
  # SPT run draw the same fresh initialisation for the same seed.
  return jax.random.fold_in(jax.random.PRNGKey(seed), zlib.crc32(phase.encode()) & 0x7FFFFFFF)


def total_steps(cfg, num_train: int) -> int:
  if cfg.num_steps > 0:
    return int(cfg.num_steps)
  return max(1, math.ceil(cfg.num_epochs * pipeline.steps_per_epoch(num_train, cfg.batch_size)))


def split_opt_state(objective, opt_state):
  """(optax state, objective state): an objective with state keeps it next to the optimiser's."""
  if objective.state_key is None:
    return opt_state, None
  return opt_state["model"], opt_state[objective.state_key]


def join_opt_state(objective, model_opt, objective_state):
  if objective.state_key is None:
    return model_opt
  return {"model": model_opt, objective.state_key: objective_state}


def accumulated_grads(objective, params, batch, rng, micro_batches: int):
  """The objective's gradients and logged metrics for `batch`, computed over `micro_batches`
  micro-batches (rows i, i + k, i + 2k, ... for micro-batch i: each device's rows stay on it) and
  averaged; micro-batch i draws its randomness from fold_in(rng, i). Only activations of one
  micro-batch are alive at a time. For a loss that is a mean over examples of equal weight (the
  classification loss on full batches) the average is the whole batch's gradient; a masked loss
  averages per-micro-batch means. Objectives with state of their own accumulate nothing."""
  k = micro_batches
  micro = jax.tree.map(lambda x: jnp.swapaxes(x.reshape((x.shape[0] // k, k) + x.shape[1:]), 0, 1),
                       batch)

  def one(carry, xs):
    i, mb = xs
    grads, _, out, _ = objective.train_grads(params, None, mb, jax.random.fold_in(rng, i))
    return jax.tree.map(jnp.add, carry, (grads, out)), None

  zeros = jax.eval_shape(lambda: objective.train_grads(
      params, None, jax.tree.map(lambda x: x[0], micro), rng)[::2])
  zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), zeros)
  (grads, out), _ = jax.lax.scan(one, zeros, (jnp.arange(k), micro))
  return jax.tree.map(lambda g: g / k, grads), jax.tree.map(lambda m: m / k, out)


def seeing_own_rows(objective, inputs_shape):
  """`objective` as a device runs it on its own rows alone, `inputs_shape` at a time (under
  shard_map, a chunk at a time): its model's attention loops over them as over one device's, or
  takes them at once where they fit the cache (platform.sequence_chunk), not as over the whole
  mesh's batch."""
  cfg = objective.model.cfg
  if cfg.attention_sequence_chunk <= 0:
    return objective
  sequences = math.prod(inputs_shape[:-1])  # pairs [B, 2, L] are 2B sequences
  own = platform.sequence_chunk(cfg.encoder_length, cfg.num_heads, devices=1, rows=sequences)
  return dataclasses.replace(objective, model=objective.model.clone(
      cfg=dataclasses.replace(cfg, attention_sequence_chunk=own)))


def with_corruption(objective, batch, rng):
  """`batch` with the objective's corruption (masks) drawn over all of it (batch['corrupted'], read
  by `Objective.drawn`), so that a step splitting it computes the whole batch's numbers."""
  corruption = objective.corrupted(batch, rng)
  return batch if corruption is None else dict(batch, corrupted=corruption)


def sum_over_chunks(fn, batch, chunks: int):
  """Σ_i fn(i, rows of chunk i) over `chunks` equal chunks of `batch`'s rows, one after another
  (a lax.scan: only one chunk's intermediates are alive at a time)."""
  split = jax.tree.map(lambda x: x.reshape((chunks, x.shape[0] // chunks) + x.shape[1:]), batch)
  zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(
      fn, 0, jax.tree.map(lambda x: x[0], split)))
  return jax.lax.scan(lambda total, xs: (jax.tree.map(jnp.add, total, fn(*xs)), None),
                      zeros, (jnp.arange(chunks), split))[0]


def flat_summed_grads(objective, mesh, chunks: int = 1):
  """(params, batch, rng) → (gradients, the batch's metric sums), each device computing its rows'
  and the devices summing both in ONE all-reduce of a flat buffer; with `chunks` > 1 each device
  takes its rows in that many equal chunks, one after another, and sums them.

  For backends whose all-reduce costs a collective per array (XLA:CPU across processes runs the
  step's gradient tuple as one gloo call per parameter array; platform.flat_gradient_all_reduce),
  and for one-core CPU devices, on which a chunk's activations stay in cache where the whole
  batch's do not (platform.batch_chunks). Exact for objectives whose loss is sums['loss']
  numerator / denominator: each chunk's gradient is weighted by its own denominator before the sum
  and the total divided by the global one, so the result is the whole batch's gradient. The
  objective's corruption (masks) is drawn over the whole batch before it is split, as the
  one-device step draws it; only dropout, drawn inside the model, comes from fold_in(rng, the
  device's index on the `data` axis) (and, with chunks, fold_in(·, the chunk's index)),
  independent per device and chunk and reproducible for the same device count and chunks.
  """
  def weighted(params, batch, rng):  # (the denominator-weighted gradient, the metric sums) of rows
    own = seeing_own_rows(objective, batch["inputs"].shape)
    (_, sums), grads = jax.value_and_grad(
        lambda p: own.loss(p, batch, rng, train=True), has_aux=True)(params)
    count = sums["loss"][1]
    return jax.tree.map(lambda g: g * count, grads), sums

  def per_device(params, batch, rng):
    rng = jax.random.fold_in(rng, jax.lax.axis_index("data"))
    if chunks == 1:
      grads, sums = weighted(params, batch, rng)
    else:
      grads, sums = sum_over_chunks(
          lambda i, rows: weighted(params, rows, jax.random.fold_in(rng, i)), batch, chunks)
    flat_grads, unravel_grads = ravel_pytree(grads)
    flat_sums, unravel_sums = ravel_pytree(sums)
    total = jax.lax.psum(jnp.concatenate([flat_grads, flat_sums.astype(flat_grads.dtype)]), "data")
    sums = unravel_sums(total[flat_grads.size:])
    scale = 1.0 / jnp.maximum(sums["loss"][1], 1.0)
    return jax.tree.map(lambda g: g * scale, unravel_grads(total[:flat_grads.size])), sums

  # Unchecked: the Dense layers' custom gradient (platform.dense_dot_general) does not carry the
  # per-device typing, and the gradient is taken inside, where each device's is its own.
  summed = jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P("data"), P()),
                         out_specs=(P(), P()), check_vma=False)

  def summed_grads(params, batch, rng):
    return summed(params, with_corruption(objective, batch, rng), rng)

  return summed_grads


def step_chunks(objective, mesh, batch_shape, accumulate_steps: int = 1) -> int:
  """How many chunks each device's rows of a training batch of `batch_shape` ([B, ...] inputs) go
  through the step in (platform.batch_chunks): where each device sees only its own rows (one
  device, or CPU processes' flat sum) and the loss allows the chunks' sum; else 1."""
  if not (objective.loss_is_ratio_of_sums and accumulate_steps == 1
          and (mesh.size == 1 or platform.flat_gradient_all_reduce(mesh))):
    return 1
  backend = mesh.devices.flat[0].platform
  return platform.batch_chunks(batch_shape[0] // mesh.size, math.prod(batch_shape[1:]), backend)


def sums_gradients_flat(objective, mesh, accumulate_steps: int = 1) -> bool:
  """Whether the train step sums its gradients with `flat_summed_grads` over the devices: where the
  platform prefers it for `mesh` and the objective's loss allows it (gradient accumulation keeps
  XLA's sum)."""
  return (platform.flat_gradient_all_reduce(mesh) and objective.loss_is_ratio_of_sums
          and accumulate_steps == 1)


def make_steps(objective, tx, trainable, mesh, accumulate_steps: int = 1,
               flat_all_reduce: bool | None = None):
  """Jitted train and eval steps, data-parallel: params replicated, batch split on the `data` axis.
  train(state, batch, rng) → (state, metrics, the objective's per-step info or None). With
  `accumulate_steps` > 1 the batch's gradients are accumulated over that many micro-batches.
  `flat_all_reduce` (None: `sums_gradients_flat`) sums the gradients in one flat all-reduce
  (`flat_summed_grads`; only for objectives whose loss is a ratio of summed metrics), as does a
  step whose rows go through in chunks (`step_chunks`, decided by the batch's shape)."""
  replicated = NamedSharding(mesh, P())
  batch_sharded = NamedSharding(mesh, P("data"))
  if flat_all_reduce is None:
    flat_all_reduce = sums_gradients_flat(objective, mesh, accumulate_steps)
  if flat_all_reduce and not (objective.loss_is_ratio_of_sums and accumulate_steps == 1):
    raise ValueError(f"objective={objective.name!r} with accumulate_steps={accumulate_steps} "
                     "cannot sum its gradients as one flat buffer.")

  def train_step(state: TrainState, batch, rng):
    rng = jax.random.fold_in(rng, state.step)
    batch = dict(batch, inputs=batch["inputs"].astype(jnp.int32))
    model_opt, objective_state = split_opt_state(objective, state.opt_state)
    chunks = step_chunks(objective, mesh, batch["inputs"].shape, accumulate_steps)
    if flat_all_reduce or chunks > 1:
      grads, sums = flat_summed_grads(objective, mesh, chunks)(state.params, batch, rng)
      out, info = objective.summarize(sums), None
    elif accumulate_steps > 1:
      grads, out = accumulated_grads(objective, state.params, batch, rng, accumulate_steps)
      info = None
    else:
      grads, objective_state, out, info = objective.train_grads(state.params, objective_state,
                                                                batch, rng)
    updates, model_opt = tx.update(grads, model_opt, state.params)
    params = optax.apply_updates(state.params, updates)
    # Frozen leaves have no say in the reported gradient norm (nor in clipping, see optim.py).
    grad_sq = sum(jnp.sum(jnp.square(g)) for g, t in
                  zip(jax.tree.leaves(grads), jax.tree.leaves(trainable)) if t)
    out["grad_norm"] = jnp.sqrt(grad_sq)
    opt_state = join_opt_state(objective, model_opt, objective_state)
    return TrainState(state.step + 1, params, opt_state), out, info

  train = jax.jit(train_step, in_shardings=(replicated, batch_sharded, replicated),
                  out_shardings=(replicated, replicated, replicated), donate_argnums=(0,),
                  compiler_options=platform.step_compiler_options(objective.model.cfg.remat))
  return train, make_eval_step(objective, mesh)


def make_eval_step(objective, mesh):
  """The jitted eval step(params, batch, rng) → the objective's metric sums, data-parallel; on one
  device in the train step's chunks of rows (`step_chunks`)."""
  replicated = NamedSharding(mesh, P())

  def eval_step(params, batch, rng):
    batch = dict(batch, inputs=batch["inputs"].astype(jnp.int32))
    chunks = step_chunks(objective, mesh, batch["inputs"].shape) if mesh.size == 1 else 1
    if chunks == 1:
      return objective.eval_sums(params, batch, rng)
    # As the train step's chunks: the corruption drawn over the whole batch, the sums added up.
    return sum_over_chunks(
        lambda _, rows: seeing_own_rows(objective, rows["inputs"].shape).eval_sums(params, rows, rng),
        with_corruption(objective, batch, rng), chunks)

  return jax.jit(eval_step, in_shardings=(replicated, NamedSharding(mesh, P("data")), replicated),
                 out_shardings=replicated)


def evaluation_rng(seed: int, phase: str) -> jax.Array:
  """The key phase `phase`'s evaluations draw from (fold_in(·, batch) per batch): its masks."""
  return jax.random.split(phase_rng(seed, phase), 3)[2]


def to_global(batch: dict[str, np.ndarray], sharding) -> dict[str, jax.Array]:
  """This process's rows → one global array per key (each process supplies its own shard)."""
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}


def abstract_like(tree, batch_scale: float = 1.0):
  """Shapes and dtypes of `tree` (the steps' in_shardings place them); with `batch_scale`, the
  leading axis scaled (a batch)."""
  def spec(x):
    shape = x.shape if batch_scale == 1.0 else (int(x.shape[0] * batch_scale),) + x.shape[1:]
    return jax.ShapeDtypeStruct(shape, x.dtype)
  return jax.tree.map(spec, tree)


def first_call_checks_memory(step, mesh, config, name: str, rebuild=None):
  """Wraps the jitted `step(state, batch, rng)` so that its first call compiles it (the compilation
  that call needs anyway) and, before running it, stops the run if the step cannot fit in memory
  (`preflight.check_step_memory`; each remedy estimated by compiling the step that `rebuild(config)`
  makes for the changed config, or `step` itself at a smaller batch), and has the platform fit the
  host heap to the step's temporaries (`platform.fit_heap_to_step`)."""
  unchecked = [True]

  def checked(*args):
    if unchecked[0]:
      unchecked[0] = False
      devices = mesh.local_devices
      start = time.perf_counter()
      memory = preflight.StepMemory.of(step.lower(*args).compile(), devices)
      compile_s = time.perf_counter() - start

      def estimate(remedy):
        variant = step if remedy.config is None or rebuild is None else rebuild(remedy.config)
        state, batch, rng = args
        return preflight.StepMemory.of(variant.lower(
            abstract_like(state), abstract_like(batch, remedy.batch_scale), abstract_like(rng)
        ).compile(), devices)

      preflight.check_step_memory(name, memory, devices, config, args[1]["inputs"].shape[-1],
                                  estimate, compile_s)
      platform.fit_heap_to_step(memory.temporaries, devices=memory.devices)
    return step(*args)

  return checked


def evaluate_split(eval_step, objective, params, arrays, cfg, rng, sharding) -> dict[str, float]:
  """Exact metrics over a whole split: numerators and denominators summed, then divided once."""
  batch_size = cfg.eval_batch_size or cfg.batch_size
  totals = None
  batches = pipeline.eval_batches(arrays, batch_size, process_index=jax.process_index(),
                                  process_count=jax.process_count())
  for i, batch in enumerate(batches):
    if cfg.max_eval_batches and i >= cfg.max_eval_batches:
      break
    # A fixed key per batch: the same masks at every evaluation, so validation numbers are comparable
    # across steps and the best-checkpoint choice is reproducible.
    m = eval_step(params, to_global(batch, sharding), jax.random.fold_in(rng, i))
    totals = m if totals is None else jax.tree.map(jnp.add, totals, m)
  return {k: float(v) for k, v in objective.summarize(jax.device_get(totals)).items()}


def _check_finite(history: list[dict], first_step: int, phase: str, last_ckpt) -> None:
  for offset, m in enumerate(history):
    if not np.isfinite(m["loss"]):
      raise FloatingPointError(
          f"[{phase}] non-finite training loss ({m['loss']}) at step {first_step + offset}. "
          f"Training stopped; the last good checkpoint is step {last_ckpt}. Lower "
          f"config.{phase}.learning_rate, add warmup, or set config.{phase}.grad_clip_norm.")


@dataclasses.dataclass
class PhaseSetup:
  """Where a phase starts: its state (fresh, handed off or resumed) and what the loop needs with it."""
  state: TrainState
  ckpts: checkpoints.PhaseCheckpoints
  schedule: Any
  tx: Any
  trainable: Any
  best_value: float | None = None
  best_step: int | None = None
  wall_before: float = 0.0
  plateau: stopping.Plateau | None = None  # the plateau rule (None: the phase runs to its cap)

  @property
  def start(self) -> int:
    return int(self.state.step)


def setup_phase(config, name: str, params, init_rng, workdir: str, mesh, steps: int, *,
                init_opt_state=lambda tx, params: tx.init(params),
                plateau: stopping.Plateau | None = None) -> PhaseSetup:
  """Fresh `params` (drawn from `init_rng`) → handed-off and rescaled (init_from), optimiser with
  freezing, checkpoints opened; or, when the phase has a latest checkpoint, the resumed state (with
  the `plateau` rule's). Writes config.json, parameters.md, init_from.json and the init checkpoint."""
  cfg = config[name]
  phase_dir = os.path.join(workdir, name)
  replicated = NamedSharding(mesh, P())
  scale_rng = jax.random.fold_in(init_rng, 1)
  ckpts = checkpoints.PhaseCheckpoints(os.path.join(phase_dir, "checkpoints"))
  resuming = bool(ckpts.latest_steps())
  if not resuming and ckpts.existing():
    logging.warning("[%s] no latest checkpoint in %s: starting from step 0 next to %s (the run "
                    "recomputes them).", name, ckpts.directory, ", ".join(ckpts.existing()))
    ckpts.discard_uncommitted(0)
  init_report = {}
  if cfg.init_from.source and not resuming:
    params, init_report = init_from.load_into(
        params, cfg.init_from, workdir=workdir, phase_names=config.phases.split(","), phase=name,
        sharding=replicated)
    logging.info("[%s] loaded %d parameter arrays from %s: %s; fresh: %s", name,
                 len(init_report["loaded"]), init_report["source"], init_report["loaded"],
                 init_report["fresh"])
  if not resuming:
    params, scale_report = init_from.apply_scales(params, cfg.init_from, scale_rng, phase=name)
    init_report.update(scale_report)
  frozen = frozenset(param_groups.resolve(cfg.freeze, params, what=f"config.{name}.freeze"))
  tx, schedule = optim.make_optimizer(cfg, steps, params, frozen)
  opt_state = jax.jit(lambda p: init_opt_state(tx, p), out_shardings=replicated)(params)
  # Every leaf placed on the mesh up front, so the first step's input matches later steps' (no retrace).
  setup = PhaseSetup(TrainState(jax.device_put(jnp.asarray(0, jnp.int32), replicated), params,
                                opt_state), ckpts, schedule, tx,
                     tree.map_with_path(lambda p, _: p not in frozen, params), plateau=plateau)
  if resuming:
    step0, params, opt_state, meta = ckpts.restore_latest(params, opt_state)
    setup.state = TrainState(jax.device_put(jnp.asarray(step0, jnp.int32), replicated), params,
                             opt_state)
    setup.best_step = meta["best_step"]
    setup.best_value = None if setup.best_step is None else meta["best_value"]
    setup.wall_before = meta["wall_time_sec"]
    if plateau is not None:
      plateau.restore(meta.get("plateau"))
    logging.info("[%s] resumed from step %d of %s (best validation %s at step %s)", name, step0,
                 ckpts.directory, setup.best_value, setup.best_step)
  # Written only once the config has proved compatible with what the workdir holds.
  write_json(os.path.join(phase_dir, "config.json"), config.to_dict())
  table = param_groups.count_table(params, frozen)
  logging.info("[%s] parameters:\n%s", name, table)
  write_text(os.path.join(phase_dir, "parameters.md"), table)
  if not resuming:
    if init_report:
      write_json(os.path.join(phase_dir, "init_from.json"), init_report)
    ckpts.save_init(params, {"seed": config.seed, "phase": name,
                             "init_from": cfg.init_from.to_dict()})
  logging.info("[%s] %s, %d steps, %d parameters (%d frozen), %d device(s) in %d process(es)",
               name, cfg.objective, steps, tree.count(params),
               sum(tree.count(tree.flatten(params)[p]) for p in frozen), jax.device_count(),
               jax.process_count())
  return setup


@dataclasses.dataclass
class LoopResult:
  state: TrainState
  val_metrics: dict
  steps_per_sec: float | None
  last_step: int = 0  # the step training ended at: the cap, or where the plateau rule stopped it


def train_loop(name: str, cfg, steps: int, setup: PhaseSetup, step_fn, batches, evaluate, writer,
               selection: str, wall_start: float, *, after_step=None, on_log=None,
               eta_check=None) -> LoopResult:
  """Steps `setup.start + 1 .. steps`: log every cfg.log_every_steps, validate (and keep the best
  checkpoint on `selection`) every cfg.eval_every_steps, save the latest every
  cfg.checkpoint_every_steps, and at the last step. `step_fn(state, batch, step)` → (state, metrics);
  `on_log(step, summary)` runs at each log and may return progress-bar fields; `after_step(step,
  state)` after each step's logging, before its evaluation; `eta_check(step, steps_per_sec)`
  (preflight.EtaCheck) once, with the rate of the training steps after the compiled first one, timed
  until preflight.ETA_PROBE_STEPS of them or ETA_PROBE_S seconds have passed.

  `setup.plateau`, if any, is asked at each validation whether the phase has stopped improving: if
  so the loop saves the latest checkpoint there and ends (a phase resumed after that stop trains no
  further). `selection`'s best value is the highest, or the lowest for a loss.

  On a stop request (SIGTERM; distributed.stop_requested: JAX's preemption sync point when
  multi-process) it saves the latest checkpoint after the step and raises distributed.Stopped."""
  with distributed.stoppable():
    return _train_loop(name, cfg, steps, setup, step_fn, batches, evaluate, writer, selection,
                       wall_start, after_step=after_step, on_log=on_log, eta_check=eta_check)


def _train_loop(name, cfg, steps, setup, step_fn, batches, evaluate, writer, selection, wall_start,
                *, after_step, on_log, eta_check) -> LoopResult:
  ckpts, schedule = setup.ckpts, setup.schedule
  state, start = setup.state, setup.start

  def save_latest(step):
    meta = {"step": step, "best_value": setup.best_value, "best_step": setup.best_step,
            "wall_time_sec": setup.wall_before + time.time() - wall_start}
    if setup.plateau is not None:
      meta["plateau"] = setup.plateau.to_meta()
    ckpts.save_latest(step, state.params, state.opt_state, meta)

  higher = objectives.base.higher_is_better(selection)
  if setup.plateau is not None and setup.plateau.stopped:  # Stopped before the kill: done.
    logging.info("[%s] stopped at step %d before: %s.", name, start, setup.plateau.stopped)
    return LoopResult(state, {}, None, last_step=start)

  bar = tqdm.tqdm(total=steps, initial=start, desc=name, disable=jax.process_index() != 0,
                  dynamic_ncols=True)
  pending, window_start, window_step = [], time.time(), start
  compiled, timed_from, train_seconds = False, start, 0.0
  eta_probe = None  # (time, step) the ETA's timing starts from, until eta_check has had its rate
  val_metrics, last_step = {}, start
  for step in range(start + 1, steps + 1):
    last_step = step
    state, metrics = step_fn(state, next(batches), step)
    pending.append(metrics)
    if not compiled:  # Exclude compilation from the throughput figures.
      jax.block_until_ready(metrics)
      compiled, timed_from, window_start, window_step = True, step, time.time(), step
      pending = [jax.device_get(metrics)]
      eta_probe = (window_start, step) if eta_check is not None else None
    elif eta_probe is not None:
      jax.block_until_ready(metrics)  # Synchronous while probing, so that timed steps have run.
      elapsed = time.time() - eta_probe[0]
      if step - eta_probe[1] >= preflight.ETA_PROBE_STEPS or elapsed >= preflight.ETA_PROBE_S:
        eta_check(step, (step - eta_probe[1]) / max(elapsed, 1e-9))
        eta_probe = None
    bar.update(1)
    is_eval = step % cfg.eval_every_steps == 0 or step == steps
    is_ckpt = step % cfg.checkpoint_every_steps == 0 or step == steps
    # Asked at every step by every process (the sync point is counted in calls); a stop logs the
    # steps since the last log, so that metrics.jsonl loses none of them.
    stop = distributed.stop_requested()
    if step % cfg.log_every_steps == 0 or is_eval or is_ckpt or stop:
      history = jax.device_get(pending)
      _check_finite(history, step - len(history) + 1, name, ckpts.latest_step())
      now = time.time()
      summary = {k: float(np.mean([h[k] for h in history])) for k in history[0]}
      summary["learning_rate"] = float(schedule(step))
      if step > window_step:
        summary["steps_per_sec"] = (step - window_step) / max(now - window_start, 1e-9)
        train_seconds += now - window_start
      writer.write(step, "train", summary)
      postfix = {"loss": f"{summary['loss']:.4f}"}
      postfix.update((on_log(step, summary) if on_log is not None else None) or {})
      bar.set_postfix(postfix, refresh=False)
      pending, window_start, window_step = [], now, step
    if after_step is not None:
      after_step(step, state)
    if is_eval:
      val_metrics = evaluate(state.params, "val")
      writer.write(step, "val", val_metrics)
      logging.info("[%s] step %d/%d val %s", name, step, steps,
                   {k: round(v, 4) for k, v in val_metrics.items()})
      if stopping.improves(val_metrics[selection], setup.best_value, higher):
        setup.best_value, setup.best_step = val_metrics[selection], step
        ckpts.save_best(step, state.params, val_metrics)
        faults.point("best_saved", step, settle=ckpts.wait_for_saves)
      if setup.plateau is not None and step < steps and setup.plateau.observe(step, val_metrics):
        save_latest(step)
        writer.flush()
        logging.info("[%s] stopping at step %d/%d: %s.", name, step, steps, setup.plateau.stopped)
        faults.point("plateau_stopped", step, settle=ckpts.wait_for_saves)
        break
    if is_ckpt:
      save_latest(step)  # The commit point: a resumed run starts from here (checkpoints.py).
      writer.flush()
    if stop:
      if not is_ckpt:
        save_latest(step)
        writer.flush()
      ckpts.close()
      bar.close()
      writer.close()
      logging.warning("[%s] stopped on request at step %d/%d: latest checkpoint %s saved; the same "
                      "command resumes from it.", name, step, steps, ckpts.directory)
      raise distributed.Stopped(name, step, ckpts.directory)
    if is_eval or is_ckpt:
      window_start = time.time()  # Throughput windows measure training steps only.
      eta_probe = (window_start, step) if eta_probe is not None else None
  bar.close()
  ckpts.wait()
  timed_steps = last_step - timed_from
  return LoopResult(state, val_metrics, timed_steps / train_seconds if train_seconds > 0 else None,
                    last_step=last_step)


def data_caveat(task: TaskData) -> str:
  """What a result on this data is not, for the log lines that report one ('' for release data)."""
  if not task.generated:
    return ""
  return (f" (on {task.name} data generated by spt-jax, not the official LRA release: not an LRA "
          f"result)")


def finish_phase(name: str, cfg, steps: int, setup: PhaseSetup, loop: LoopResult, evaluate, writer,
                 selection: str, wall_start: float, phase_dir: str, task: TaskData, **extra) -> dict:
  """Tests the checkpoint chosen on validation; writes and returns results.json (plus `extra`)."""
  val_metrics = loop.val_metrics
  if not val_metrics:  # Nothing left to train (resumed at the end): re-measure the final state.
    val_metrics = evaluate(loop.state.params, "val")
  if setup.best_step is None:
    raise RuntimeError(f"[{name}] finished without a best checkpoint in {setup.ckpts.directory}.")
  best = (setup.best_step, setup.ckpts.best(setup.best_step))
  best_params_dir = setup.ckpts.best_params_dir(setup.best_step)
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                          loop.state.params)
  test_metrics = evaluate(checkpoints.restore_item(best_params_dir, abstract), "test")
  writer.write(best[0], "test", test_metrics)
  writer.close()
  faults.point("test_recorded", best[0])
  plateau = setup.plateau
  results = {
      "phase": name, "objective": cfg.objective, "steps": steps,
      # Where training ended and why: the cap (`steps`) or the plateau rule.
      "stopped_at_step": loop.last_step,
      "stop_reason": plateau.stopped if plateau is not None and plateau.stopped else "cap",
      "final_val": val_metrics, "best_val": dict(best[1], step=best[0]),
      "test_of_best": test_metrics,
      "selected_checkpoint": os.fspath(workdir_path(best_params_dir)),  # a URL stays one
      "selection_metric": selection,
      "wall_time_sec": setup.wall_before + time.time() - wall_start,
      # Training steps only: compilation, evaluation and checkpointing are not in this figure.
      "steps_per_sec": loop.steps_per_sec,
      "num_parameters": tree.count(loop.state.params), "devices": jax.device_count(),
      "data_source": task.source,
      # Generated data is not the official release: a number on it is not an LRA result.
      "data_generated": task.generated,
      "environment": provenance.environment(),
  }
  results.update(extra)
  setup.ckpts.close()
  write_json(os.path.join(phase_dir, "results.json"), results)
  logging.info("[%s] done: best val %s=%.4f at step %d, test %s%s", name, selection,
               best[1][selection], best[0], test_metrics, data_caveat(task))
  return results


@dataclasses.dataclass(frozen=True)
class AnalysisHooks:
  """Analysis that runs inside a phase, handed in by the caller (experiment.py passes
  spt_jax.analysis's), so that the trainer imports no analysis; a hook left None does not run.

  attention_tracker(name, cfg, model, task, writer, steps, sharding): an `after_step(step, state)`
    hook for `train_loop`, or None when the phase tracks nothing.
  weights_figure(rows, losses, path, title): draws a composite phase's 'weights' rows of
    metrics.jsonl into the image file `path`.
  """
  attention_tracker: Callable | None = None
  weights_figure: Callable | None = None


def train_phase(config, name: str, task: TaskData, workdir: str, mesh,
                hooks: AnalysisHooks = AnalysisHooks()) -> dict:
  """Runs (or resumes) phase `name` of `config` in `<workdir>/<name>` and returns its results.
  `hooks.attention_tracker`, if any, logs attention metrics during training."""
  cfg = config[name]
  phase_dir = os.path.join(workdir, name)
  replicated = NamedSharding(mesh, P())
  batch_sharding = NamedSharding(mesh, P("data"))
  wall_start = time.time()

  # ---------------------------------------------------------------- Data, model and objective
  objective = make_objective(config, name, task)
  splits = objective.splits(task)
  if cfg.train_examples:
    splits = dict(splits, train=pipeline.subset(splits["train"], cfg.train_examples,
                                                seed=config.seed, what=f"config.{name}.train_examples"))
    logging.info("[%s] training on %d examples of the training split (train_examples).", name,
                 cfg.train_examples)
  num_train = pipeline.num_examples(splits["train"])
  steps = total_steps(cfg, num_train)
  init_rng, train_rng, eval_rng = jax.random.split(phase_rng(config.seed, name), 3)
  selection = stopping.selection_metric(cfg, objective)
  if cfg.accumulate_steps > 1 and objective.state_key is not None:
    raise ValueError(f"config.{name}.accumulate_steps={cfg.accumulate_steps}: objective "
                     f"{cfg.objective!r} updates state of its own every step (loss weights), "
                     f"which micro-batches would not see; use accumulate_steps=1.")
  logging.info("[%s] %s, %d steps per epoch", name, cfg.objective,
               pipeline.steps_per_epoch(num_train, cfg.batch_size))

  # ---------------------------------------------------------------- Parameters and optimiser
  dummy = example_inputs(splits)
  params = jax.jit(lambda rng: objective.init_params(rng, dummy), out_shardings=replicated)(init_rng)
  step_flops = flops.train_step_flops(params, objective.model.cfg,
                                      (cfg.batch_size,) + dummy.shape[1:],
                                      objective.per_sequence_heads)
  if cfg.match_compute_of:
    steps = flops.matched_steps(cfg.match_compute_of, step_flops)
    logging.info("[%s] %d steps: the training compute of %s (%.3g FLOPs) at %.3g FLOPs per step.",
                 name, steps, cfg.match_compute_of, steps * step_flops, step_flops)
  setup = setup_phase(
      config, name, params, init_rng, workdir, mesh, steps,
      init_opt_state=lambda tx, p: join_opt_state(objective, tx.init(p), objective.init_state()),
      plateau=stopping.Plateau.of(cfg, selection))

  # ---------------------------------------------------------------- Steps
  train_step, eval_step = make_steps(objective, setup.tx, setup.trainable, mesh,
                                     cfg.accumulate_steps)
  if sums_gradients_flat(objective, mesh, cfg.accumulate_steps):
    logging.info("[%s] Gradients summed over the devices as one flat buffer.", name)
  chunks = step_chunks(objective, mesh, (cfg.batch_size,) + dummy.shape[1:], cfg.accumulate_steps)
  if chunks > 1:
    logging.info("[%s] Each device takes its %d rows in %d chunks, one after another.", name,
                 cfg.batch_size // mesh.size, chunks)
  train_step = first_call_checks_memory(
      train_step, mesh, config, name,
      rebuild=lambda changed: make_steps(make_objective(changed, name, task), setup.tx,
                                         setup.trainable, mesh, changed[name].accumulate_steps)[0])
  batches = pipeline.train_batches(splits["train"], cfg.batch_size, seed=config.seed + 1,
                                   start_step=setup.start, process_index=jax.process_index(),
                                   process_count=jax.process_count())
  writer = MetricWriter(phase_dir, resume_step=setup.start, config=config.to_dict())
  reporter = objective.reporter(cfg, steps, writer)

  def evaluate(params, split):
    return evaluate_split(eval_step, objective, params, splits[split], cfg, eval_rng,
                          batch_sharding)

  def step_fn(state, batch, step):
    state, metrics, info = train_step(state, to_global(batch, batch_sharding), train_rng)
    if reporter is not None:
      reporter.after_step(step, info)
    return state, metrics

  after_step = None
  if hooks.attention_tracker is not None and objective.attention_model is not None:
    after_step = hooks.attention_tracker(name, cfg, objective.attention_model, task, writer, steps,
                                         replicated)
  elif cfg.attention_metrics_every_steps > 0:
    logging.warning("[%s] attention metrics are not tracked for objective %r.", name,
                    cfg.objective)

  def on_log(step, summary):
    postfix = {"acc": f"{summary['accuracy']:.3f}"} if "accuracy" in summary else {}
    postfix.update((reporter.on_log(step) if reporter is not None else None) or {})
    return postfix

  # ---------------------------------------------------------------- Train loop and final test
  loop = train_loop(name, cfg, steps, setup, step_fn, batches, evaluate, writer, selection,
                    wall_start, after_step=after_step, on_log=on_log,
                    eta_check=preflight.EtaCheck(config, name, steps, workdir))
  extra = objective.finish(name, phase_dir, hooks)
  # Training compute (spt_jax/flops.py): the steps trained, evaluation not included.
  extra.update(train_flops_per_step=step_flops, train_flops=step_flops * loop.last_step)
  return finish_phase(name, cfg, steps, setup, loop, evaluate, writer, selection, wall_start,
                      phase_dir, task, **extra)
