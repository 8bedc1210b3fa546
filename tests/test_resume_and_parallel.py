"""Resume after a real kill, and data parallelism over 8 host devices, both against in-process runs."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

from conftest import ROOT, load_config, tiny, tiny_flags
from spt_jax import checkpoints, distributed, experiment, tree

PHASES = ("pretrain", "finetune")


def final_params(workdir, phase):
  latest = os.path.join(workdir, phase, "checkpoints", "latest")
  (step,) = os.listdir(latest)
  # restore_item builds the target from the metadata: an 8-device checkpoint has no 1-device sharding.
  return tree.flatten(checkpoints.restore_item(os.path.join(latest, step, "params")))


def _records(workdir, phase):
  lines = [json.loads(l) for l in open(os.path.join(workdir, phase, "metrics.jsonl"))]
  for line in lines:
    line.pop("steps_per_sec", None)
  return lines


def test_killed_run_resumes_to_identical_parameters(tmp_path, cache_dir):
  steps = 30
  reference = str(tmp_path / "reference")
  experiment.run(tiny(load_config("listops_spt"), cache_dir, steps), reference)

  workdir = str(tmp_path / "killed")
  proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "main.py"),
                           "--config=configs/listops_spt.py", f"--workdir={workdir}",
                           "--cpu_devices=1",  # As the in-process runs: bitwise comparable.
                           *tiny_flags(cache_dir, steps)], cwd=ROOT,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  first_ckpt = os.path.join(workdir, "pretrain", "checkpoints", "latest", "3")
  deadline = time.time() + 180
  while not os.path.isdir(first_ckpt) and time.time() < deadline and proc.poll() is None:
    time.sleep(0.02)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert os.path.isdir(first_ckpt), "the run never wrote its first checkpoint"
  assert not os.path.exists(os.path.join(workdir, "pretrain", "results.json")), "killed too late"

  experiment.run(tiny(load_config("listops_spt"), cache_dir, steps), workdir)
  for phase in PHASES:
    a, b = final_params(reference, phase), final_params(workdir, phase)
    assert a.keys() == b.keys()
    for path in a:
      assert np.array_equal(a[path], b[path]), f"{phase}: {path} differs after resume"
    assert _records(reference, phase) == _records(workdir, phase)
  ref = json.load(open(os.path.join(reference, "results.json")))
  got = json.load(open(os.path.join(workdir, "results.json")))
  for phase in PHASES:
    assert ref[phase]["test_of_best"] == got[phase]["test_of_best"]
    assert ref[phase]["best_val"] == got[phase]["best_val"]


def test_eight_devices_match_one_device(tmp_path, spt_run):
  reference, _, _ = spt_run
  workdir = str(tmp_path / "dp8")
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, os.path.join(ROOT, "main.py"),
                        "--config=configs/listops_spt.py", f"--workdir={workdir}",
                        *tiny_flags(spt_run[1].data.cache_dir)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  results = json.load(open(os.path.join(workdir, "results.json")))
  assert results["pretrain"]["devices"] == 8
  for phase in PHASES:
    a, b = final_params(reference, phase), final_params(workdir, phase)
    for path in a:
      np.testing.assert_allclose(a[path], b[path], rtol=1e-4, atol=1e-5, err_msg=f"{phase}/{path}")


def test_main_splits_the_cpu_into_one_device_per_core_as_batches_allow():
  code = ("import jax; from spt_jax import distributed; from conftest import load_config; "
          "c = load_config('listops_spt', 'smoke'); c.finetune.batch_size = 6; "
          "n = distributed.split_cpu_into_devices(c, {requested}); "
          "print(n, jax.device_count(), jax.config.values['jax_cpu_enable_async_dispatch'])")
  env = {k: v for k, v in os.environ.items() if not k.startswith("SPT_JAX") and k != "XLA_FLAGS"}
  for requested, cores in ((-1, distributed.usable_cores()), (4, 4), (1, 1)):
    out = subprocess.run([sys.executable, "-c", code.format(requested=requested)], cwd=ROOT,
                         env=dict(env, JAX_PLATFORMS="cpu", PYTHONPATH=os.path.join(ROOT, "tests")),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    expected = distributed.cpu_device_count([8, 6], cores)  # smoke pretrain 8, finetune 6
    # Several devices: synchronous dispatch, one multi-device program in flight at a time.
    assert out.stdout.split() == [str(expected), str(expected), str(expected == 1)], (
        requested, out.stdout)
  assert distributed.cpu_device_count([32, 8], 16) == 8
  assert distributed.cpu_device_count([3], 2) == 1
  assert distributed.split_cpu_into_devices(None, -1, {"SPT_JAX_INIT": "1"}) == 1
