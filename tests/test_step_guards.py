"""Issue 7's regression guard: the jitted train step compiles once and moves nothing but the batch.

A retrace or recompile per step (a Python scalar or a host array slipping into the step's inputs, a
state leaf whose sharding or weak type changes after the first step) and a hidden host transfer per
step (a numpy constant fed as an argument, a host callback) each cost far more than a small step.
Compilations are counted through `jax.monitoring`'s compile events, which name the function; transfers
are refused with `jax.transfer_guard`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from conftest import load_config, tiny
from spt_jax import config_lib, experiment, objectives, optim, train
from spt_jax.data import listops, pipeline
from spt_jax.data.tasks import TaskData

TRACE = "/jax/core/compile/jaxpr_trace_duration"
COMPILE = "/jax/core/compile/backend_compile_duration"


class CompileEvents:
  """Records (event, function name) for every trace and XLA compilation while active."""

  def __init__(self):
    self.events = []

  def _listen(self, event, duration, **kwargs):
    if event in (TRACE, COMPILE):
      self.events.append((event, str(kwargs.get("fun_name", ""))))

  def __enter__(self):
    jax.monitoring.register_event_duration_secs_listener(self._listen)
    return self

  def __exit__(self, *exc):
    jax.monitoring.unregister_event_duration_listener(self._listen)

  def count(self, event, name="train_step"):
    return sum(1 for e, fun in self.events if e == event and name in fun)


def fresh(state):
  # The step donates its state; each test steps a copy and leaves the fixture's intact.
  return jax.tree.map(jnp.copy, state)


@pytest.fixture(scope="module")
def step_setup():
  """A tiny SPT step built as train_phase builds it: state on the mesh up front, real make_steps."""
  rng = np.random.default_rng(0)
  arrays = {"inputs": rng.integers(3, listops.VOCAB.size, (64, 32)).astype(np.uint16),
            "labels": rng.integers(0, 10, 64).astype(np.int32)}
  task = TaskData("listops", listops.VOCAB, 10, 32, {"train": arrays}, "test arrays")
  phase = config_lib.phase_config("mlm", batch_size=8, num_steps=20, warmup_steps=2)
  objective = objectives.make(phase, task.vocab)
  model = train.build_model(
      config_lib.transformer_config(num_layers=1, d_model=16, num_heads=2, d_ff=32), task, objective)
  mesh = experiment.make_mesh()
  replicated = NamedSharding(mesh, P())
  dummy = jnp.zeros((1, 32), jnp.int32)
  params = jax.jit(lambda r: model.init(r, dummy)["params"],
                   out_shardings=replicated)(jax.random.PRNGKey(0))
  tx, _ = optim.make_optimizer(phase, 20, params)
  opt_state = jax.jit(tx.init, out_shardings=replicated)(params)
  state = train.TrainState(jax.device_put(jnp.asarray(0, jnp.int32), replicated), params,
                           opt_state)
  step, _ = train.make_steps(model, objective, tx, jax.tree.map(lambda _: True, params), mesh)
  return {"state": state, "step": step, "arrays": arrays, "rng": jax.device_put(
      jax.random.PRNGKey(1), replicated), "batch_sharding": NamedSharding(mesh, P("data"))}


def test_train_step_compiles_once_and_transfers_only_the_batch(step_setup):
  s = step_setup
  step, rng, sharding = s["step"], s["rng"], s["batch_sharding"]
  batches = pipeline.train_batches(s["arrays"], 8, seed=0)
  with CompileEvents() as seen:
    state, metrics = step(fresh(s["state"]), train.to_global(next(batches), sharding), rng)
    # From the second step on: already-placed batches only, every implicit transfer refused.
    with jax.transfer_guard("disallow"):
      for _ in range(4):
        batch = train.to_global(next(batches), sharding)  # explicit placement: the batch itself
        state, metrics = step(state, batch, rng)
  assert seen.count(TRACE) == 1, seen.events
  assert seen.count(COMPILE) == 1, seen.events
  assert step._cache_size() == 1
  # The outputs stay on the device: nothing was fetched to produce them.
  for leaf in jax.tree.leaves((state, metrics)):
    assert isinstance(leaf, jax.Array), type(leaf)
  assert int(jax.device_get(state.step)) == 5
  assert np.isfinite(jax.device_get(metrics["loss"]))


def test_transfer_guard_is_effective_and_step_has_no_host_callbacks(step_setup):
  s = step_setup
  host_batch = next(pipeline.train_batches(s["arrays"], 8, seed=3))
  state = fresh(s["state"])
  # Without this the test above could pass on a backend whose guard never fires.
  with jax.transfer_guard("disallow"), pytest.raises(Exception, match="host-to-device"):
    s["step"](state, host_batch, s["rng"])
  # On CPU the device's memory is the host's, so a device-to-host guard never fires; what could
  # move data to the host inside a step is a host callback, and the lowered step must have none.
  lowered = s["step"].lower(state, train.to_global(host_batch, s["batch_sharding"]), s["rng"])
  text = lowered.as_text()
  assert "callback" not in text.lower(), "the train step calls back into the host"


def test_experiment_run_compiles_each_phase_step_once(tmp_path, cache_dir):
  """Through the whole trainer (evaluation and checkpoints between steps): one trace and one
  compilation of the train step per phase, however many steps run."""
  config = tiny(load_config("listops_spt"), cache_dir, steps=6)
  with CompileEvents() as seen:
    experiment.run(config, str(tmp_path))
  phases = len(config.phases.split(","))
  assert seen.count(TRACE) == phases, seen.events
  assert seen.count(COMPILE) == phases, seen.events
