"""Resume after a real kill, and data parallelism over 8 host devices, both against in-process runs."""
import json
import os
import signal
import subprocess
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from conftest import ROOT, load_config, tiny, tiny_flags
from spt_jax import checkpoints, experiment, platform, tree

PHASES = ("pretrain", "finetune")


def final_params(workdir, phase):
  latest = os.path.join(workdir, phase, "checkpoints", "latest")
  step = max(os.listdir(latest), key=int)
  # restore_item builds the target from the metadata: an 8-device checkpoint has no 1-device sharding.
  return tree.flatten(checkpoints.restore_item(os.path.join(latest, step, "params")))


def _records(workdir, phase):
  lines = [json.loads(l) for l in open(os.path.join(workdir, phase, "metrics.jsonl"))]
  for line in lines:
    line.pop("steps_per_sec", None)
  return lines


def _kill_and_rerun(args, kill_at, env=None):
  """main.py killed by SIGKILL at the named point (spt_jax/faults.py); returns its stderr."""
  full_env = dict(os.environ, **(env or {}), SPT_JAX_KILL_AT=kill_at)
  out = subprocess.run([sys.executable, os.path.join(ROOT, "main.py"), *args], cwd=ROOT,
                       env=full_env, capture_output=True, text=True, timeout=240)
  assert out.returncode == -signal.SIGKILL, (kill_at, out.returncode, out.stderr[-3000:])
  return out.stderr


def _best_steps(workdir, phase, metric):
  best, steps = -np.inf, []
  for r in _records(workdir, phase):
    if r["split"] == "val" and r[metric] > best:
      best, steps = r[metric], steps + [r["step"]]
  return steps


def _tensorboard_scalars(directory):
  """(tag, step) of every scalar in a TensorBoard directory's event files (TFRecord frames)."""
  from tensorboardX.proto import event_pb2
  out = []
  for name in sorted(os.listdir(directory)):
    data = open(os.path.join(directory, name), "rb").read()
    pos = 0
    while pos + 12 <= len(data):
      length = int.from_bytes(data[pos:pos + 8], "little")
      if pos + 16 + length > len(data):
        break  # A frame cut short by the kill.
      event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
      out += [(v.tag, event.step) for v in event.summary.value]
      pos += 16 + length
  return out


def test_kills_at_every_critical_point_resume_bit_identically(tmp_path, cache_dir):
  """SIGKILL between a best and its latest save (with and without an earlier latest), during an
  asynchronous latest save, at the phase transition and after the test record: every rerun
  resumes, and the finished run (confined to one core) equals an uninterrupted one (unconfined)
  bit for bit, metrics included."""
  steps, lr = 15, 3e-3  # This learning rate gives pretraining a new best at a later step.
  reference = str(tmp_path / "reference")
  config = tiny(load_config("listops_spt"), cache_dir, steps)
  config.pretrain.learning_rate = lr
  experiment.run(config, reference)
  pretrain_best = _best_steps(reference, "pretrain", "accuracy")
  assert pretrain_best[0] == 3 and len(pretrain_best) > 1, pretrain_best

  workdir = str(tmp_path / "killed")
  # Confined to one core (as the sweep runner places runs), against the unconfined reference. At
  # these tiny shapes XLA:CPU splits no operation by its thread count, so the two must agree bit for
  # bit; at the study's shapes a different core count changes float32 rounding
  # (benchmarks/README.md, "Sweep processes on their own cores").
  one_core = max(os.sched_getaffinity(0))
  args = ["--config=configs/listops_spt.py", f"--workdir={workdir}", "--cpu_devices=1",
          f"--cores={one_core}", *tiny_flags(cache_dir, steps),
          f"--config.pretrain.learning_rate={lr}"]
  _kill_and_rerun(args, f"best_saved@{pretrain_best[1]}")
  # What the kill left: a best checkpoint no latest one names, TensorBoard flushed at each latest.
  committed = max(int(s) for s in os.listdir(os.path.join(workdir, "pretrain/checkpoints/latest")))
  assert os.path.isdir(os.path.join(workdir, f"pretrain/checkpoints/best/{pretrain_best[1]}"))
  assert committed < pretrain_best[1]
  records = map(json.loads, open(os.path.join(workdir, "pretrain/metrics.jsonl")))
  logged = [(f"{r['split']}/{k}", r["step"]) for r in records
            for k in r if k not in ("step", "split") and r["step"] <= committed]
  events = _tensorboard_scalars(os.path.join(workdir, "pretrain/tensorboard"))
  assert sorted(e for e in events if e[1] <= committed) == sorted(logged)

  stderr = _kill_and_rerun(args, f"latest_saving@{pretrain_best[1]}")
  assert "Metadata file does not exist" not in stderr  # Orbax's warning on every resume, once.
  _kill_and_rerun(args, "phase_finished")
  assert os.path.exists(os.path.join(workdir, "pretrain/results.json"))
  _kill_and_rerun(args, "best_saved@3")  # Fine-tuning's first best, before any latest save.
  _kill_and_rerun(args, "test_recorded")
  assert not os.path.exists(os.path.join(workdir, "finetune/results.json"))
  out = subprocess.run([sys.executable, os.path.join(ROOT, "main.py"), *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=240)
  assert out.returncode == 0, out.stderr[-3000:]

  for phase in PHASES:
    a, b = final_params(reference, phase), final_params(workdir, phase)
    assert a.keys() == b.keys()
    for path in a:
      assert np.array_equal(a[path], b[path]), f"{phase}: {path} differs after the kills"
    assert _records(reference, phase) == _records(workdir, phase)  # No record twice, none lost.
  ref = json.load(open(os.path.join(reference, "results.json")))
  got = json.load(open(os.path.join(workdir, "results.json")))
  for phase in PHASES:
    for key in ("test_of_best", "best_val", "final_val"):
      assert ref[phase][key] == got[phase][key], (phase, key)


def test_eight_devices_match_one_device(tmp_path, spt_run):
  reference, _, _ = spt_run
  workdir = str(tmp_path / "dp8")
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, os.path.join(ROOT, "main.py"),
                        "--config=configs/listops_spt.py", f"--workdir={workdir}",
                        "--cpu_processes=1", *tiny_flags(spt_run[1].data.cache_dir)], cwd=ROOT,
                       env=env,
                       capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  results = json.load(open(os.path.join(workdir, "results.json")))
  assert results["pretrain"]["devices"] == 8
  for phase in PHASES:
    a, b = final_params(reference, phase), final_params(workdir, phase)
    for path in a:
      np.testing.assert_allclose(a[path], b[path], rtol=1e-4, atol=1e-5, err_msg=f"{phase}/{path}")
  # Written on 8 devices, read here on 1 by plain Orbax with no target (no topology recorded).
  for kind in ("best", "init", "latest"):
    directory = os.path.join(workdir, "finetune", "checkpoints", kind)
    item = os.path.join(directory, max(os.listdir(directory), key=int), "params")
    restored = tree.flatten(ocp.StandardCheckpointer().restore(item))
    assert restored.keys() == final_params(reference, "finetune").keys(), kind


def test_opted_in_cpu_devices_split_as_batches_allow_and_warn_once():
  # main.py's default is one device (--cpu_devices=1, tests/test_cpu_default_stress.py runs it);
  # -1 (one per core) or N are the opt-in, which must say what it risks, once per process.
  code = ("import jax; from spt_jax import platform; from conftest import load_config; "
          "c = load_config('listops_spt', 'smoke'); c.finetune.batch_size = 6; "
          "n = platform.split_cpu_into_devices(c, {requested}); "
          "assert platform.split_cpu_into_devices(c, {requested}) == n; "
          "print(n, jax.device_count(), jax.config.values['jax_cpu_enable_async_dispatch'])")
  env = {k: v for k, v in os.environ.items() if not k.startswith("SPT_JAX") and k != "XLA_FLAGS"}
  for requested, cores in ((-1, platform.usable_cores()), (4, 4), (1, 1)):
    out = subprocess.run([sys.executable, "-c", code.format(requested=requested)], cwd=ROOT,
                         env=dict(env, JAX_PLATFORMS="cpu", PYTHONPATH=os.path.join(ROOT, "tests")),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    expected = platform.cpu_device_count([8, 6], cores)  # smoke pretrain 8, finetune 6
    # Several devices: synchronous dispatch, one multi-device program in flight at a time.
    assert out.stdout.split() == [str(expected), str(expected), str(expected == 1)], (
        requested, out.stdout)
    # Several devices: one warning naming the abort under load; one device: none.
    assert out.stderr.count("Termination timeout for all reduce") == (expected > 1), (
        requested, out.stderr[-2000:])
  assert platform.cpu_device_count([32, 8], 16) == 8
  assert platform.cpu_device_count([3], 2) == 1
  assert platform.split_cpu_into_devices(None, -1, {"SPT_JAX_INIT": "1"}) == 1
  assert platform.split_cpu_into_devices(None, 1) == 1  # main.py's default: nothing changes.


def test_cpu_processes_one_per_core_as_batches_divide(monkeypatch):
  config = load_config("listops_spt", "smoke")
  config.pretrain.update(batch_size=8, eval_batch_size=8)
  config.finetune.update(batch_size=6, eval_batch_size=6)
  monkeypatch.setattr(platform, "expects_cpu_backend", lambda platforms=None: True)
  monkeypatch.setattr(platform, "usable_cores", lambda: 4)
  monkeypatch.setattr(platform, "parse_cores", lambda text: tuple(range(len(text.split(",")))))
  assert platform.cpu_process_count(config, -1, environ={}) == 2  # 4 cores; 6 splits in 2, not 4
  assert platform.cpu_process_count(config, -1, cores="0,1", environ={}) == 2
  assert platform.cpu_process_count(config, -1, cores="0", environ={}) == 1
  assert platform.cpu_process_count(config, 3, environ={}) == 3 - 1  # as far as 8 and 6 divide
  assert platform.cpu_process_count(config, 2, cores="0", environ={}) == 1  # one per core at most
  assert platform.cpu_process_count(config, 1, environ={}) == 1
  # Already one process of a job, or not on the CPU: this process runs the job itself.
  assert platform.cpu_process_count(config, -1, environ={"SPT_JAX_INIT": "1"}) == 1
  monkeypatch.setattr(platform, "expects_cpu_backend", lambda platforms=None: False)
  assert platform.cpu_process_count(config, -1, environ={}) == 1


# Column sums of a tall matrix: XLA:CPU hands such reductions to YNNPACK, which splits them over
# its threads, so their float32 rounding shows the thread count a process computes with.
_REDUCTIONS = r"""
import sys
from spt_jax import platform
platform.configure_process(None, cpu_devices=1, retain_freed_memory=False, cores=sys.argv[1],
                           cpu_threads=int(sys.argv[2]))
import jax, jax.numpy as jnp, numpy as np
x = jax.random.normal(jax.random.key(0), (16384, 64)) * 100 + 3
sums = jax.jit(lambda x: (jnp.sum(x, axis=0), jnp.sum(jnp.tanh(x), axis=0)))(x)
print(np.concatenate([np.asarray(s) for s in sums]).tobytes().hex())
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_the_thread_count_not_the_cores_decides_float32_rounding():
  """A process confined to one core with as many XLA threads as one on two cores (--cpu_threads,
  what the sweep runner gives its runs) computes the same bits; with one thread per core
  (main.py's default) it differs, which is what the first check would miss without the option."""
  two = sorted(os.sched_getaffinity(0))[:2]
  env = {k: v for k, v in os.environ.items() if k != platform.CPU_THREADS_ENV}

  def sums(cores, threads=0):
    out = subprocess.run([sys.executable, "-c", _REDUCTIONS, cores, str(threads)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()[-1]

  on_two_cores = sums(f"{two[0]},{two[1]}")
  assert sums(f"{two[1]}", threads=2) == on_two_cores
  assert sums(f"{two[1]}") != on_two_cores


def test_cpu_threads_are_set_apart_from_the_cores(monkeypatch):
  monkeypatch.setattr(platform, "usable_cores", lambda: 1)
  assert platform.cpu_threads({}) == 1
  assert platform.cpu_threads({platform.CPU_THREADS_ENV: "4"}) == 4
  environ = {}
  platform.set_cpu_threads(2, environ)
  assert environ == {platform.CPU_THREADS_ENV: "2"}
  # The attention's tiling follows the threads too, so a confined run tiles as an unconfined one.
  monkeypatch.setenv(platform.CPU_THREADS_ENV, "2")
  assert platform.cpu_cores_per_device(devices=1) == 2
  for bad in (0, -1, 1.5, True):
    with pytest.raises(ValueError, match="--cpu_threads"):
      platform.set_cpu_threads(bad, {})


_FLAT_STEP_CHECK = r"""
import jax, jax.numpy as jnp, ml_collections, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from spt_jax import config_lib, experiment, optim, train
from spt_jax.data import pipeline
from spt_jax.data.tasks import TaskData
from spt_jax.data.vocab import BYTE_VOCAB

assert jax.device_count() == 2
rng = np.random.default_rng(0)
pixels = {"inputs": rng.integers(0, 256, (32, 16), dtype=np.uint8),
          "labels": rng.integers(0, 2, 32, np.int32)}
tokens = rng.integers(BYTE_VOCAB.first_regular_id, BYTE_VOCAB.size, (32, 16)).astype(np.uint16)
tokens[:, 12:] = 0  # padding, never masked or scored
tokens = {"inputs": tokens, "labels": rng.integers(0, 2, 32, np.int32)}
mesh = experiment.make_mesh(jax.devices())
whole, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
for objective_name, arrays, kind, extra in (
    ("mlm", pixels, "pixels", dict(pixel_loss="l1")), ("mlm", tokens, "tokens", dict(bert_mix=True)),
    ("clm", tokens, "tokens", {})):
  phase = config_lib.phase_config(objective_name, batch_size=8, num_steps=10, **extra)
  task = TaskData("t", BYTE_VOCAB, 2, 16, {"train": arrays}, "test data", input_kind=kind)
  model = config_lib.transformer_config(num_layers=1, d_model=16, num_heads=2, d_ff=32)
  objective = train.make_objective(ml_collections.ConfigDict(dict(model=model, phase=phase)),
                                   "phase", task)
  init = jax.jit(lambda r: objective.init_params(r, jnp.zeros((1, 16), jnp.int32)),
                 out_shardings=whole)
  tx, _ = optim.make_optimizer(phase, 10, init(jax.random.PRNGKey(0)), frozenset())
  final = {}
  for flat in (False, True):
    params = init(jax.random.PRNGKey(0))  # the step donates its state
    step, _ = train.make_steps(objective, tx, jax.tree.map(lambda _: True, params), mesh,
                               flat_all_reduce=flat)
    state = train.TrainState(jax.device_put(jnp.asarray(0, jnp.int32), whole), params,
                             jax.jit(tx.init, out_shardings=whole)(params))
    batches = pipeline.train_batches(arrays, 8, seed=0)
    for _ in range(3):
      state, metrics, _ = step(state, train.to_global(next(batches), split), jax.random.PRNGKey(1))
    final[flat] = (jax.tree.leaves(state.params), jax.tree.map(float, metrics))
  for a, b in zip(final[False][0], final[True][0]):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)
  for name, value in final[False][1].items():
    np.testing.assert_allclose(final[True][1][name], value, rtol=1e-5, atol=1e-6, err_msg=name)
  print("ok", objective_name, kind, extra)
"""


def test_flat_gradient_sum_computes_the_partitioned_step():
  # train.flat_summed_grads (the step of CPU processes) against XLA's partitioned step, on two
  # in-process devices: the same parameters and logged metrics for every kind of objective, so the
  # masks are the whole batch's (drawn before the split) and the loss normalised by its total.
  env = {k: v for k, v in os.environ.items() if not k.startswith("SPT_JAX")}
  out = subprocess.run([sys.executable, "-c", _FLAT_STEP_CHECK], cwd=ROOT, capture_output=True,
                       text=True, timeout=240,
                       env=dict(env, JAX_PLATFORMS="cpu", XLA_FLAGS=(env.get("XLA_FLAGS", "")
                                + " --xla_force_host_platform_device_count=2").strip()))
  assert out.returncode == 0, out.stderr[-3000:]
  assert out.stdout.count("ok ") == 3, out.stdout


def test_processes_on_one_host_share_its_memory(monkeypatch):
  monkeypatch.setattr(jax, "process_count", lambda: 2)
  # main.py --cpu_processes / launch/local.sh: a coordinator on the loopback address.
  assert platform.processes_sharing_this_host({"SPT_JAX_COORDINATOR": "127.0.0.1:1234"}) == 2
  assert platform.processes_sharing_this_host({"SPT_JAX_COORDINATOR": "localhost:1234"}) == 2
  # A pod or SLURM: one process per host.
  assert platform.processes_sharing_this_host({"SPT_JAX_COORDINATOR": "10.0.0.2:1234"}) == 1
  assert platform.processes_sharing_this_host({}) == 1


def _chunk_check_objective(objective_name, kind, extra, length=16, batch=8):
  import ml_collections
  from spt_jax import config_lib, train
  from spt_jax.data.tasks import TaskData
  from spt_jax.data.vocab import BYTE_VOCAB
  rng = np.random.default_rng(0)
  if kind == "pixels":
    inputs = rng.integers(0, 256, (32, length), dtype=np.uint8)
  else:
    inputs = rng.integers(BYTE_VOCAB.first_regular_id, BYTE_VOCAB.size, (32, length)).astype(np.uint16)
    inputs[:, length - 4:] = 0  # padding, never masked or scored
  arrays = {"inputs": inputs, "labels": rng.integers(0, 2, 32, np.int32)}
  phase = config_lib.phase_config(objective_name, batch_size=batch, num_steps=10, **extra)
  task = TaskData("t", BYTE_VOCAB, 2, length, {"train": arrays}, "test data", input_kind=kind)
  model = config_lib.transformer_config(num_layers=1, d_model=16, num_heads=2, d_ff=32)
  config = ml_collections.ConfigDict(dict(model=model, phase=phase))
  return train.make_objective(config, "phase", task), phase, arrays


def _step_and_state(objective, phase, arrays, mesh):
  import jax.numpy as jnp
  from jax.sharding import NamedSharding, PartitionSpec as P
  from spt_jax import optim, train
  from spt_jax.data import pipeline
  whole, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
  params = jax.jit(lambda r: objective.init_params(r, jnp.zeros((1, arrays["inputs"].shape[1]),
                                                                jnp.int32)),
                   out_shardings=whole)(jax.random.PRNGKey(0))
  tx, _ = optim.make_optimizer(phase, 10, params, frozenset())
  step, _ = train.make_steps(objective, tx, jax.tree.map(lambda _: True, params), mesh)
  state = train.TrainState(jax.device_put(jnp.asarray(0, jnp.int32), whole), params,
                           jax.jit(tx.init, out_shardings=whole)(params))
  batches = (train.to_global(b, split)
             for b in pipeline.train_batches(arrays, phase.batch_size, seed=0))
  return step, state, batches


def _steps_params(objective, phase, arrays, mesh, steps=3):
  """Parameters and logged metrics after `steps` steps, and the evaluation sums of the parameters on
  a batch of 6 examples padded to 8."""
  from jax.sharding import NamedSharding, PartitionSpec as P
  from spt_jax import train
  from spt_jax.data import pipeline
  step, state, batches = _step_and_state(objective, phase, arrays, mesh)
  for _ in range(steps):
    state, metrics, _ = step(state, next(batches), jax.random.PRNGKey(1))
  six = {k: v[:6] for k, v in arrays.items()}
  eval_batch = train.to_global(next(pipeline.eval_batches(six, 8)), NamedSharding(mesh, P("data")))
  sums = train.make_eval_step(objective, mesh)(state.params, eval_batch, jax.random.PRNGKey(2))
  return (jax.tree.leaves(state.params), jax.tree.map(float, metrics),
          [float(x) for x in jax.tree.leaves(sums)])


def test_cpu_step_takes_the_batch_in_chunks_of_512_tokens():
  # The study's batches (32 rows of 256) and the cpu shape's (8 of 512) in chunks of 2 rows.
  assert platform.batch_chunks(32, 256, backend="cpu") == 16
  assert platform.batch_chunks(8, 512, backend="cpu") == 4  # never fewer than 2 rows a chunk
  assert platform.batch_chunks(4, 1024, backend="cpu") == 2
  assert platform.batch_chunks(1, 4000, backend="cpu") == 1
  assert platform.batch_chunks(12, 200, backend="cpu") == 4  # 3 rows: the fewest ≥ 512 tokens that divide 12
  assert platform.batch_chunks(7, 16, backend="cpu") == 1   # nothing short of the batch holds 512
  # A chunk whose attention scores fit the cache budget takes its attention at once, not in a loop.
  assert platform.sequence_chunk(256, 4, backend="cpu", devices=1, cores_per_device=1, rows=2) == 0
  assert platform.sequence_chunk(256, 4, backend="cpu", devices=1, cores_per_device=1, rows=8) == 1
  assert platform.sequence_chunk(512, 4, backend="cpu", devices=1, cores_per_device=1, rows=2) == 1
  assert platform.batch_chunks(32, 256, backend="cuda") == 1
  assert platform.batch_chunks(32, 256, backend="tpu") == 1


def test_chunked_step_computes_the_whole_batch_step(monkeypatch):
  # The step on one CPU device with its rows in chunks (train.flat_summed_grads) against the same
  # step with the whole batch at once: the same parameters, logged metrics and evaluation sums for
  # every kind of objective, so masks are the whole batch's and each chunk's gradient is weighted by
  # its count.
  from spt_jax import train
  mesh = experiment.make_mesh(jax.devices()[:1])
  monkeypatch.setattr(platform, "CPU_CHUNK_MIN_TOKENS", 32)  # chunks of 2 rows of 16 tokens
  # (The causal and classification objectives' sums are ratios of sums as these are; the 2-device
  # check above runs the causal one, the test below the classification step's chunks.)
  for objective_name, kind, extra in (
      ("mlm", "pixels", dict(pixel_loss="l1")), ("mlm", "tokens", dict(bert_mix=True))):
    objective, phase, arrays = _chunk_check_objective(objective_name, kind, extra)
    assert train.step_chunks(objective, mesh, (8, 16)) == 4
    chunked = _steps_params(objective, phase, arrays, mesh, steps=2)
    with monkeypatch.context() as m:
      m.setattr(platform, "batch_chunks", lambda *a, **k: 1)
      whole = _steps_params(objective, phase, arrays, mesh, steps=2)
    for a, b in zip(whole[0], chunked[0]):
      np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)
    for name, value in whole[1].items():
      np.testing.assert_allclose(chunked[1][name], value, rtol=1e-5, atol=1e-6,
                                 err_msg=f"{objective_name} {kind} {name}")
    np.testing.assert_allclose(chunked[2], whole[2], rtol=1e-5, atol=1e-6)  # evaluation


def test_chunked_step_holds_one_chunks_activations(monkeypatch):
  # Why the chunks are faster: only one chunk's activations are alive at a time, so the compiled
  # step's temporaries shrink with the chunk (and stay in a CPU core's cache).
  from spt_jax import train
  mesh = experiment.make_mesh(jax.devices()[:1])
  objective, phase, arrays = _chunk_check_objective("classification", "tokens", {}, length=128,
                                                    batch=32)
  assert train.step_chunks(objective, mesh, (32, 128)) == 8
  temp = {}
  for chunked in (True, False):
    with monkeypatch.context() as m:
      if not chunked:
        m.setattr(platform, "batch_chunks", lambda *a, **k: 1)
      step, state, batches = _step_and_state(objective, phase, arrays, mesh)
      compiled = step.lower(state, next(batches), jax.random.PRNGKey(1)).compile()
      temp[chunked] = compiled.memory_analysis().temp_size_in_bytes
  assert temp[True] < 0.5 * temp[False], temp
