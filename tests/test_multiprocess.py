"""Two JAX processes over loopback (launch/local.sh) against the one-process `spt_run`; launchers.

The two-process run trains the same tiny config as `spt_run` with one CPU device per process, so the
global batch is split across processes as across the hosts of a pod. Every subprocess runs in its
own session with a timeout, and the whole session is killed if it overruns.
"""
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from conftest import ROOT, tiny_flags
from spt_jax import checkpoints, distributed, tree
from spt_jax.data import pipeline, tasks

PHASES = ("pretrain", "finetune")
LOCAL = os.path.join(ROOT, "launch", "local.sh")
SCRIPTS = ("local.sh", "tpu_pod.sh", "slurm.sbatch")
# Generous against a loaded 2-core machine; an unloaded one needs a fraction.
RUN_TIMEOUT = 300


def _env(**extra):
  env = dict(os.environ, JAX_PLATFORMS="cpu", SPT_JAX_INIT_TIMEOUT="120", **extra)
  env.pop("XLA_FLAGS", None)  # One device per process: the split is across processes only.
  for name in (distributed.INIT, distributed.COORDINATOR, distributed.NUM_PROCESSES,
               distributed.PROCESS_ID):
    env.pop(name, None)
  return env


def _run(argv, timeout, env=None) -> subprocess.CompletedProcess:
  """Runs argv in a new session; on timeout the whole session (launcher and processes) is killed."""
  proc = subprocess.Popen(argv, cwd=ROOT, env=env or _env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True)
  try:
    out, err = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
    out, err = proc.communicate()
    pytest.fail(f"{argv[:4]} did not finish in {timeout} s; stderr tail:\n{err[-8000:]}")
  return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _lines(text: str, process: int) -> list[str]:
  prefix = f"[{process}] "
  return [l[len(prefix):] for l in text.splitlines() if l.startswith(prefix)]


def _final_params(workdir: str, phase: str) -> dict:
  return tree.flatten(checkpoints.restore_item(
      checkpoints.resolve_params_dir(os.path.join(workdir, phase), checkpoints.LATEST)))


def _checksums(flat: dict) -> dict:
  """Per path: the sum and the sum of squares, as the checksum worker computes them."""
  sums = {}
  for path, value in sorted(flat.items()):
    value = np.asarray(value, np.float64)
    sums[path] = [float(np.sum(value)), float(np.sum(np.square(value)))]
  return sums


# Runs main.py's main() unchanged, recording which training examples each process materialised.
_TRAIN_WORKER = """
import faulthandler, hashlib, json, os, sys
# Where each thread is, should the run hang: printed shortly before the test gives up on it.
faulthandler.dump_traceback_later({dump_after})
sys.path.insert(0, {root!r})
import numpy as np
from absl import app
import main
from spt_jax.data import pipeline

original = pipeline.train_batches
calls = []

def recorded(arrays, global_batch, *, seed, start_step=0, process_index=0, process_count=1):
  batches = original(arrays, global_batch, seed=seed, start_step=start_step,
                   process_index=process_index, process_count=process_count)
  first = next(batches)
  full = next(original(arrays, global_batch, seed=seed, start_step=start_step))
  digest = lambda rows: sorted(hashlib.sha1(r.tobytes()).hexdigest() for r in rows)
  path = os.path.join({log_dir!r}, f"call{{len(calls)}}_process{{process_index}}.json")
  calls.append(path)
  with open(path, "w") as f:
    json.dump({{"process_index": process_index, "process_count": process_count,
               "local": digest(first["inputs"]), "global": digest(full["inputs"])}}, f)
  yield first
  yield from batches

pipeline.train_batches = recorded
app.run(main.main)
"""

# Restores checkpoints onto the global mesh of every process and prints what each process holds.
_CHECKSUM_WORKER = """
import json, os, sys
sys.path.insert(0, {root!r})
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from spt_jax import checkpoints, distributed, experiment, tree

assert distributed.maybe_initialize(), "not started as a multi-process job"
replicated = NamedSharding(experiment.make_mesh(), P())
total = jax.jit(lambda t: sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(t)),
                out_shardings=replicated)
out = {{}}
for phase_dir in sys.argv[1:]:
  ckpts = checkpoints.PhaseCheckpoints(os.path.join(phase_dir, "checkpoints"))
  step, params = ckpts.latest_step(), checkpoints.restore_item(ckpts.latest_params_dir(),
                                                                sharding=replicated)
  ckpts.close()
  leaves = tree.flatten(params)
  assert all(len(x.sharding.device_set) == jax.device_count() for x in leaves.values())
  out[phase_dir] = {{
      "step": step, "device_total": float(total(params)),
      "leaves": {{p: [float(np.sum(np.asarray(v, np.float64))),
                     float(np.sum(np.square(np.asarray(v, np.float64))))]
                 for p, v in sorted(leaves.items())}}}}
print("CHECKSUM " + json.dumps(out, sort_keys=True), flush=True)
"""


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory, spt_run):
  """The `spt_run` config trained by two processes: (workdir, launcher result, shard log dir)."""
  base = tmp_path_factory.mktemp("two_process")
  workdir, log_dir = str(base / "workdir"), str(base / "shards")
  os.makedirs(log_dir)
  worker = base / "train_worker.py"
  worker.write_text(_TRAIN_WORKER.format(root=ROOT, log_dir=log_dir, dump_after=RUN_TIMEOUT - 30))
  # --pin, as `main.py --cpu_processes` launches: each process confined to a core of its own.
  out = _run(["bash", LOCAL, "--pin", f"--script={worker}", "2", "--", "--config=configs/listops_spt.py",
              f"--workdir={workdir}", *tiny_flags(spt_run[1].data.cache_dir)], RUN_TIMEOUT)
  assert out.returncode == 0, out.stderr[-4000:]
  return workdir, out, log_dir


# ---------------------------------------------------------------------------------------- Unit

def test_initialize_arguments_come_from_the_environment():
  assert distributed.initialize_kwargs({}) is None
  assert distributed.initialize_kwargs({"SPT_JAX_INIT": "0"}) is None
  assert distributed.initialize_kwargs({"SPT_JAX_INIT": "1"}) == {}  # TPU pod, SLURM: detected
  assert distributed.initialize_kwargs({
      "SPT_JAX_INIT": "1", "SPT_JAX_COORDINATOR": "127.0.0.1:1234", "SPT_JAX_NUM_PROCESSES": "4",
      "SPT_JAX_PROCESS_ID": "3", "SPT_JAX_INIT_TIMEOUT": "60"}) == {
          "coordinator_address": "127.0.0.1:1234", "num_processes": 4, "process_id": 3,
          "initialization_timeout": 60}
  for env, message in [
      ({"SPT_JAX_INIT": "yes"}, "SPT_JAX_INIT='yes' must be 1"),
      ({"SPT_JAX_PROCESS_ID": "1"}, "SPT_JAX_PROCESS_ID set without SPT_JAX_INIT=1"),
      ({"SPT_JAX_INIT": "1", "SPT_JAX_COORDINATOR": "localhost"}, "must be host:port"),
      ({"SPT_JAX_INIT": "1", "SPT_JAX_NUM_PROCESSES": "two"}, "must be an integer >= 1"),
      ({"SPT_JAX_INIT": "1", "SPT_JAX_NUM_PROCESSES": "2", "SPT_JAX_PROCESS_ID": "2"},
       "is not below SPT_JAX_NUM_PROCESSES=2")]:
    with pytest.raises(ValueError, match=re.escape(message)):
      distributed.initialize_kwargs(env)


def test_processes_read_disjoint_shards_of_every_global_batch():
  arrays = {"inputs": np.arange(40)[:, None] * np.ones((1, 3), int), "labels": np.arange(40)}
  for count in (2, 4):
    streams = [pipeline.train_batches(arrays, 8, seed=5, start_step=3, process_index=i,
                                      process_count=count) for i in range(count)]
    whole = pipeline.train_batches(arrays, 8, seed=5, start_step=3)
    for _ in range(12):  # across epoch boundaries (5 steps per epoch)
      parts = [next(s)["labels"] for s in streams]
      assert all(len(p) == 8 // count for p in parts)
      assert len(set(np.concatenate(parts))) == 8, "two processes read the same example"
      assert sorted(np.concatenate(parts)) == sorted(next(whole)["labels"])
  seen = []
  for i in range(2):
    for b in pipeline.eval_batches(arrays, 6, process_index=i, process_count=2):
      seen += list(b["labels"][b["weights"] > 0])
  assert sorted(seen) == list(range(40))


def test_global_batch_order_does_not_depend_on_the_process_count():
  arrays = {"labels": np.arange(40)}
  whole = pipeline.train_batches(arrays, 8, seed=5)
  streams = [pipeline.train_batches(arrays, 8, seed=5, process_index=i, process_count=2)
             for i in range(2)]
  for _ in range(6):
    np.testing.assert_array_equal(np.concatenate([next(s)["labels"] for s in streams]),
                                  next(whole)["labels"])


# ----------------------------------------------------------------------------------- Launchers

@pytest.mark.parametrize("script", SCRIPTS)
def test_launch_scripts_parse(script):
  out = subprocess.run(["bash", "-n", os.path.join(ROOT, "launch", script)], capture_output=True,
                       text=True, timeout=30)
  assert out.returncode == 0, out.stderr


def test_local_dry_run_prints_one_command_per_process():
  out = _run(["bash", LOCAL, "--dry-run", "3", "--", "--config=configs/listops_spt.py",
              "--workdir=/tmp/a b"], 30)
  assert out.returncode == 0, out.stderr
  lines = out.stdout.splitlines()
  assert len(lines) == 3
  coordinators = {re.search(r"SPT_JAX_COORDINATOR=(\S+)", l).group(1) for l in lines}
  assert len(coordinators) == 1 and re.fullmatch(r"127\.0\.0\.1:\d+", coordinators.pop())
  for i, line in enumerate(lines):
    assert f"SPT_JAX_PROCESS_ID={i} " in line and "SPT_JAX_NUM_PROCESSES=3 " in line
    assert "SPT_JAX_INIT=1 " in line and "main.py --config=configs/listops_spt.py" in line
    assert line.rstrip().endswith(r"--workdir=/tmp/a\ b")
  assert "SPT_JAX_PROCESS_ID" in _run(["bash", LOCAL, "--help"], 30).stdout


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_main_runs_as_one_process_per_core_through_local_sh(tmp_path):
  cores = sorted(os.sched_getaffinity(0))[:2]
  # DRY_RUN=1 makes local.sh print the commands main.py would become instead of running them.
  out = _run([sys.executable, os.path.join(ROOT, "main.py"), "--config=configs/listops_spt.py:smoke",
              f"--workdir={tmp_path}", "--cpu_processes=2", f"--cores={cores[0]},{cores[1]}"],
             120, env=_env(DRY_RUN="1"))
  assert out.returncode == 0, out.stderr[-3000:]
  commands = out.stdout.strip().splitlines()
  assert len(commands) == 2, out.stdout
  for i, command in enumerate(commands):
    assert f"SPT_JAX_PROCESS_ID={i}" in command and "SPT_JAX_NUM_PROCESSES=2" in command
    # The user's flags, then the child's own, which win: one process each, on a core of its own.
    assert shlex.split(command)[-3:] == [f"--cores={cores[0]},{cores[1]}", "--cpu_processes=1",
                                         f"--cores={cores[i]}"], command
  bad = _run([sys.executable, os.path.join(ROOT, "main.py"), "--config=configs/listops_spt.py:smoke",
              f"--workdir={tmp_path}", "--cpu_processes=2", "--cpu_devices=2"], 120,
             env=_env(DRY_RUN="1"))
  assert bad.returncode != 0 and "choose one" in bad.stderr, bad.stderr[-2000:]


def test_each_process_output_line_arrives_whole(tmp_path):
  # The processes' output filters share local.sh's stderr: a line written in pieces (a long error,
  # a progress bar) must not let the other process's lines in mid-line, or its "[ID] " tag is lost.
  script = tmp_path / "pieces.py"
  script.write_text(textwrap.dedent("""
      import os, sys, time
      if os.environ["SPT_JAX_PROCESS_ID"] == "0":
        for piece in range(8):
          sys.stderr.write(("error: " if piece == 0 else "") + str(piece) * 20)
          sys.stderr.flush()
          time.sleep(0.05)
        sys.stderr.write("\\n")
        sys.stderr.write("bar 1\\rbar 2\\rbar 3\\n")
      else:
        for n in range(12):
          print(f"line {n}", file=sys.stderr, flush=True)
          time.sleep(0.03)
  """))
  out = _run(["bash", LOCAL, f"--script={script}", "2", "--"], RUN_TIMEOUT)
  assert out.returncode == 0, out.stderr[-3000:]
  lines = [l for l in out.stderr.splitlines() if l.startswith(("[0] ", "[1] "))]
  assert _lines(out.stderr, 0)[:4] == ["error: " + "".join(str(p) * 20 for p in range(8)),
                                       "bar 1", "bar 2", "bar 3"], out.stderr
  assert _lines(out.stderr, 1) == [f"line {n}" for n in range(12)], out.stderr
  assert len(lines) == 16, out.stderr


def test_processes_stop_when_the_launcher_is_killed(tmp_path):
  # SIGKILL leaves local.sh no chance to pass anything on; each process asked the kernel for a
  # SIGTERM on its parent's death (distributed.stop_with_parent), as main.py does when launched.
  script = tmp_path / "orphan.py"
  script.write_text(textwrap.dedent(f"""
      import os, signal, sys, time
      sys.path.insert(0, {ROOT!r})
      from spt_jax import distributed
      i = os.environ["SPT_JAX_PROCESS_ID"]
      assert os.environ[distributed.STOP_WITH_LAUNCHER] == "1"
      signal.signal(signal.SIGTERM, lambda *_: (open(os.path.join({str(tmp_path)!r}, "term" + i),
                                                     "w").close(), sys.exit(0)))
      distributed.stop_with_parent()
      open(os.path.join({str(tmp_path)!r}, "ready" + i), "w").close()
      time.sleep(60)
  """))
  proc = subprocess.Popen(["bash", LOCAL, f"--script={script}", "2", "--"], cwd=ROOT, env=_env(),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          start_new_session=True)
  try:
    deadline = time.time() + 30
    while not {"ready0", "ready1"} <= set(os.listdir(tmp_path)) and time.time() < deadline:
      time.sleep(0.05)
    assert {"ready0", "ready1"} <= set(os.listdir(tmp_path)), "the processes did not start"
    proc.kill()
    proc.wait()
    deadline = time.time() + 20
    while not {"term0", "term1"} <= set(os.listdir(tmp_path)) and time.time() < deadline:
      time.sleep(0.05)
    assert {"term0", "term1"} <= set(os.listdir(tmp_path)), os.listdir(tmp_path)
  finally:
    with contextlib.suppress(ProcessLookupError):
      os.killpg(proc.pid, signal.SIGKILL)


def test_local_stops_every_process_when_one_fails(tmp_path):
  script = tmp_path / "one_fails.py"
  script.write_text(textwrap.dedent(f"""
      import os, sys, time
      started = os.path.join({str(tmp_path)!r}, "started")
      print("started", flush=True)
      if os.environ["SPT_JAX_PROCESS_ID"] == "0":
        open(started, "w").close()
        time.sleep(120)
      # Fails once process 0 is surely running, so that it has something to be stopped from.
      deadline = time.time() + 30
      while not os.path.exists(started) and time.time() < deadline:
        time.sleep(0.05)
      sys.exit(3)
  """))
  start = time.time()
  out = _run(["bash", LOCAL, f"--script={script}", "2", "--"], 60)
  assert out.returncode == 3, out.stderr
  assert time.time() - start < 45, "the surviving process was not stopped"
  assert _lines(out.stdout, 0) == ["started"] and _lines(out.stdout, 1) == ["started"]
  assert "process 1 exited with status 3" in out.stderr


def test_local_forwards_termination_and_kills_a_process_that_ignores_it(tmp_path):
  # Process 0 stops on SIGTERM; process 1 ignores it (as XLA's preemption notifier swallows it) and
  # must be killed once KILL_GRACE has passed, which the exit status reports.
  script = tmp_path / "sleeper.py"
  script.write_text(textwrap.dedent(f"""
      import os, signal, sys, time
      here, me = {str(tmp_path)!r}, os.environ["SPT_JAX_PROCESS_ID"]
      mark = lambda what: open(os.path.join(here, what + me), "w").close()
      def stop(*_):
        mark("stopped")
        sys.exit(0)
      signal.signal(signal.SIGTERM, stop if me == "0" else signal.SIG_IGN)
      mark("ready")
      time.sleep(120)
  """))
  proc = subprocess.Popen(["bash", LOCAL, f"--script={script}", "2", "--"], cwd=ROOT,
                          env=_env(KILL_GRACE="2"), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, start_new_session=True)
  try:
    deadline = time.time() + 30
    while not {"ready0", "ready1"} <= set(os.listdir(tmp_path)) and time.time() < deadline:
      time.sleep(0.05)
    assert {"ready0", "ready1"} <= set(os.listdir(tmp_path)), "the processes did not start"
    start = time.time()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
  finally:
    if proc.poll() is None:
      os.killpg(proc.pid, signal.SIGKILL)
      proc.communicate()
  assert proc.returncode == 128 + signal.SIGKILL, err
  assert 1 <= time.time() - start < 20, err  # bash's SECONDS counts whole seconds
  assert "stopped0" in os.listdir(tmp_path) and "stopped1" not in os.listdir(tmp_path), err
  assert "process 1 exited with status 137" in err and "process 0 exited" not in err, err


# ------------------------------------------------------------------ Two processes, end to end

def test_two_processes_end_with_the_one_process_parameters(two_process_run, spt_run):
  workdir, out, _ = two_process_run
  reference = spt_run[0]
  results = json.load(open(os.path.join(workdir, "results.json")))
  assert results["pretrain"]["devices"] == 2
  for phase in PHASES:
    a, b = _final_params(reference, phase), _final_params(workdir, phase)
    assert a.keys() == b.keys()
    for path in a:
      np.testing.assert_allclose(b[path], a[path], rtol=1e-4, atol=1e-5, err_msg=f"{phase}/{path}")
  # Process 1 is quiet: INFO only up to announcing itself, no progress bar; process 0 shows both.
  info = [l for l in _lines(out.stderr, 1) if re.match(r"I\d{4} ", l)]
  assert info and "JAX process 1 of 2" in info[-1], info[-3:]
  assert not any(re.match(r"(pretrain|finetune):", l) for l in _lines(out.stderr, 1))
  assert any("JAX process 0 of 2" in l for l in _lines(out.stderr, 0))
  # On CPU devices of two processes the step sums its gradients as one flat buffer
  # (train.flat_summed_grads), and the parameters above match the one-process run's all the same.
  assert sum("Gradients summed over the devices as one flat buffer" in l
             for l in _lines(out.stderr, 0)) == len(PHASES)
  cores = sorted(os.sched_getaffinity(0))
  if len(cores) >= 2:
    for process in (0, 1):
      assert any(f"Confined to core(s) {cores[process]}." in l for l in _lines(out.stderr, process))
  assert any(l.startswith("pretrain:") for l in _lines(out.stderr, 0))


def test_each_process_trained_on_its_own_shard(two_process_run, spt_run):
  _, _, log_dir = two_process_run
  records = {}
  for name in os.listdir(log_dir):
    call, process = re.fullmatch(r"call(\d+)_process(\d+)\.json", name).groups()
    records.setdefault(int(call), {})[int(process)] = json.load(open(os.path.join(log_dir, name)))
  assert sorted(records) == [0, 1]  # one training stream per phase
  batch_size = spt_run[1].pretrain.batch_size
  for per_process in records.values():
    assert sorted(per_process) == [0, 1]
    first, second = per_process[0], per_process[1]
    assert first["process_count"] == second["process_count"] == 2
    assert len(first["local"]) == len(second["local"]) == batch_size // 2
    assert not set(first["local"]) & set(second["local"])
    assert sorted(first["local"] + second["local"]) == first["global"] == second["global"]


def test_two_process_evaluation_counts_every_example_once(two_process_run, spt_run):
  workdir = two_process_run[0]
  reference = spt_run[2]
  got = json.load(open(os.path.join(workdir, "results.json")))
  for phase in PHASES:
    for key in ("final_val", "best_val", "test_of_best"):
      a, b = reference[phase][key], got[phase][key]
      assert a.keys() == b.keys(), (phase, key)
      for metric in a:
        np.testing.assert_allclose(b[metric], a[metric], rtol=1e-4, atol=1e-5,
                                   err_msg=f"{phase} {key} {metric}")
  # metrics.jsonl comes from process 0 alone: one record per step and split, as in one process.
  def records(w, phase):
    with open(os.path.join(w, phase, "metrics.jsonl")) as f:
      return [(r["step"], r["split"]) for r in map(json.loads, f)]
  for phase in PHASES:
    assert records(workdir, phase) == records(spt_run[0], phase)


def test_every_process_restores_the_same_checkpoint(two_process_run, spt_run, tmp_path):
  workdir = two_process_run[0]
  reference = spt_run[0]
  worker = tmp_path / "checksum_worker.py"
  worker.write_text(_CHECKSUM_WORKER.format(root=ROOT))
  dirs = [os.path.join(w, p) for w in (workdir, reference) for p in PHASES]
  out = _run(["bash", LOCAL, f"--script={worker}", "2", "--", *dirs], RUN_TIMEOUT)
  assert out.returncode == 0, out.stderr[-4000:]
  views = []
  for process in (0, 1):
    (line,) = [l for l in _lines(out.stdout, process) if l.startswith("CHECKSUM ")]
    views.append(json.loads(line[len("CHECKSUM "):]))
  assert views[0] == views[1], "the processes restored different values"
  for phase_dir, view in views[0].items():
    phase = os.path.basename(phase_dir)
    expected = _checksums(_final_params(reference, phase))
    assert view["step"] == spt_run[1][phase].num_steps
    assert view["leaves"].keys() == expected.keys()
    exact = os.path.dirname(phase_dir) == reference  # the 1-process checkpoint, read on 2 processes
    for path, sums in view["leaves"].items():
      if exact:
        assert sums == expected[path], f"{phase_dir}: {path}"
      else:
        np.testing.assert_allclose(sums, expected[path], rtol=1e-4, atol=1e-5, err_msg=path)
    np.testing.assert_allclose(view["device_total"], sum(s for s, _ in expected.values()),
                               rtol=1e-5, atol=1e-4)


# ----------------------------------------------------------------- Stopping and data agreement

# main.py unchanged, with the pretraining phase slowed from step 4 on (every process sleeps before
# each step, so that a SIGTERM sent then lands mid-phase) and process 0 marking when it got there.
_SLOWED_WORKER = """
import os, sys, time
sys.path.insert(0, {root!r})
from absl import app
import main
from spt_jax.data import pipeline

original = pipeline.train_batches
calls = []

def slowed(arrays, global_batch, *, seed, start_step=0, **kwargs):
  calls.append(None)
  for step, batch in enumerate(original(arrays, global_batch, seed=seed, start_step=start_step,
                                        **kwargs), start=start_step + 1):
    if len(calls) == 1 and step >= 4:
      if os.environ["SPT_JAX_PROCESS_ID"] == "0" and step == 4:
        open({mark!r}, "w").close()
      time.sleep(0.5)
    yield batch

pipeline.train_batches = slowed
app.run(main.main)
"""


def test_sigterm_to_the_job_saves_at_the_sync_point_and_resumes_bit_identically(
    two_process_run, spt_run, tmp_path):
  workdir, mark = str(tmp_path / "workdir"), str(tmp_path / "at_step_4")
  worker = tmp_path / "slowed_worker.py"
  worker.write_text(_SLOWED_WORKER.format(root=ROOT, mark=mark))
  # Pretraining alone: it computes what the reference run's pretraining did, in half the time.
  args = ["--config=configs/listops_spt.py", f"--workdir={workdir}",
          *tiny_flags(spt_run[1].data.cache_dir), "--config.phases=pretrain"]
  proc = subprocess.Popen(["bash", LOCAL, f"--script={worker}", "2", "--", *args], cwd=ROOT,
                          env=_env(KILL_GRACE="60"), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True)
  try:
    deadline = time.time() + RUN_TIMEOUT
    while not os.path.exists(mark) and proc.poll() is None and time.time() < deadline:
      time.sleep(0.05)
    assert os.path.exists(mark), proc.communicate(timeout=30)[1][-4000:]
    proc.send_signal(signal.SIGTERM)  # To the job: local.sh passes it on to every process.
    _, err = proc.communicate(timeout=120)
  finally:
    if proc.poll() is None:
      os.killpg(proc.pid, signal.SIGKILL)
      proc.communicate()
  assert proc.returncode == 0, err[-4000:]
  assert "every process stopped cleanly" in err
  # Each process caught SIGTERM through XLA's preemption notifier and stopped at the same step.
  stops = [re.findall(r"\[pretrain\] stopped on request at step (\d+)/6", "\n".join(_lines(err, i)))
           for i in (0, 1)]
  assert stops[0] == stops[1] and len(stops[0]) == 1, err[-4000:]
  step = int(stops[0][0])
  assert 4 <= step <= 6, step
  ckpts = checkpoints.PhaseCheckpoints(os.path.join(workdir, "pretrain", "checkpoints"))
  assert ckpts.latest_step() == step
  ckpts.close()
  assert not os.path.exists(os.path.join(workdir, "pretrain", "results.json"))

  resumed = _run(["bash", LOCAL, "2", "--", *args], RUN_TIMEOUT)
  assert resumed.returncode == 0, resumed.stderr[-4000:]
  assert any(f"resumed from step {step}" in l for l in _lines(resumed.stderr, 0))
  reference = two_process_run[0]
  a, b = _final_params(reference, "pretrain"), _final_params(workdir, "pretrain")
  assert a.keys() == b.keys()
  for path in a:
    np.testing.assert_array_equal(b[path], a[path], err_msg=path)
  want, got = (json.load(open(os.path.join(w, "results.json"))) for w in (reference, workdir))
  for key in ("final_val", "best_val", "test_of_best"):
    assert got["pretrain"][key] == want["pretrain"][key], key
  # Validation and test records as the uninterrupted run's; training records at its steps and at the
  # stop, which logs the steps since the last log (so the next one averages fewer steps).
  def records(w, train):
    with open(os.path.join(w, "pretrain", "metrics.jsonl")) as f:
      return [r for r in map(json.loads, f) if (r["split"] == "train") == train]
  assert records(workdir, False) == records(reference, False)
  assert ({r["step"] for r in records(workdir, True)}
          == {r["step"] for r in records(reference, True)} | {step})


# Process 1 reads its own copy of the data cache, which `differ` edits: one label of one split.
_OTHER_CACHE_WORKER = """
import os, sys
sys.path.insert(0, {root!r})
if os.environ["SPT_JAX_PROCESS_ID"] == "1":
  sys.argv = [a if not a.startswith("--config.data.cache_dir=") else
              "--config.data.cache_dir=" + {other!r} for a in sys.argv]
from absl import app
import main
app.run(main.main)
"""


def test_a_process_whose_data_cache_differs_stops_the_run_naming_the_split(spt_run, tmp_path):
  cache = spt_run[1].data.cache_dir
  other = str(tmp_path / "other_cache")
  shutil.copytree(cache, other)
  # The session cache holds every generated data set of the suite: change the run's own.
  root = tasks.load(spt_run[1].data).source
  val = os.path.join(other, os.path.relpath(root, cache), "listops-1000", "basic_val.tsv")
  with open(val) as f:
    lines = f.read().splitlines()
  source, label = lines[1].rsplit("\t", 1)
  lines[1] = f"{source}\t{(int(label) + 1) % 10}"  # One label of one split, the format kept.
  with open(val, "w") as f:
    f.write("\n".join(lines) + "\n")
  worker = tmp_path / "other_cache_worker.py"
  worker.write_text(_OTHER_CACHE_WORKER.format(root=ROOT, other=other))
  workdir = str(tmp_path / "workdir")
  # --pin, as `main.py --cpu_processes` launches: each process confined to a core of its own.
  out = _run(["bash", LOCAL, "--pin", f"--script={worker}", "2", "--", "--config=configs/listops_spt.py",
              f"--workdir={workdir}", *tiny_flags(cache)], RUN_TIMEOUT)
  assert out.returncode == 1, out.stderr[-4000:]
  for process in (0, 1):
    errors = [l for l in _lines(out.stderr, process) if l.startswith("error: ")]
    assert len(errors) == 1, [l for l in out.stderr.splitlines() if "rror" in l or "rerun" in l]
    error = errors[0]
    assert "The processes loaded different data for config.data" in error, error
    assert "split 'val' differs on process(es) [1] from process 0's" in error, error
    assert "'train'" not in error and "'test'" not in error, error
  assert not os.path.exists(os.path.join(workdir, "pretrain")), "it trained on differing data"
