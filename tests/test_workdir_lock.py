"""One run per workdir: a second process stops before writing, and a dead holder never blocks."""
import os
import signal
import subprocess
import sys

import pytest
from conftest import ROOT, load_config

from spt_jax import config_lib, experiment, sweep, workdir_lock


def _listing(root):
  return sorted((os.path.relpath(os.path.join(d, f), root), os.path.getmtime(os.path.join(d, f)))
                for d, _, files in os.walk(root) for f in files)


def test_a_second_run_on_a_workdir_in_use_stops_before_writing(tmp_path):
  config = load_config("synthetic_spt", "smoke")
  with workdir_lock.hold(str(tmp_path)):
    before = _listing(tmp_path)
    with pytest.raises(workdir_lock.WorkdirInUse,
                       match=rf"--workdir={tmp_path} is in use by another run \(pid {os.getpid()}: "
                             r".*python.*\); .*Nothing was changed"):
      experiment.run(config, str(tmp_path))
    assert _listing(tmp_path) == before  # byte for byte: the lock file holds nothing
  assert workdir_lock.holder(str(tmp_path)) is None


def test_the_lock_dies_with_its_process(tmp_path):
  holder = subprocess.Popen(
      [sys.executable, "-c", "import sys, time\nfrom spt_jax import workdir_lock\n"
       f"with workdir_lock.hold({str(tmp_path)!r}):\n  print('held', flush=True)\n  time.sleep(120)"],
      cwd=ROOT, stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "held"
    assert workdir_lock.holder(str(tmp_path)).startswith(f"pid {holder.pid}: ")
    assert "workdir_lock.hold" in workdir_lock.holder(str(tmp_path))  # its command line
    with pytest.raises(workdir_lock.WorkdirInUse, match=f"pid {holder.pid}: "):
      with workdir_lock.hold(str(tmp_path)):
        pass
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    holder.stdout.close()
  assert workdir_lock.holder(str(tmp_path)) is None  # the kernel released it: no stale lock
  with workdir_lock.hold(str(tmp_path)):
    assert workdir_lock.holder(str(tmp_path)).startswith(f"pid {os.getpid()}: ")
  # Another process index of the same job is another lock.
  with workdir_lock.hold(str(tmp_path), 0), workdir_lock.hold(str(tmp_path), 1):
    assert workdir_lock.holder(str(tmp_path), 1) is not None


def test_a_sweep_leaves_a_run_held_elsewhere_and_its_log_alone(tmp_path):
  spec = config_lib.sweep_config(base="configs/synthetic_spt.py:smoke", seeds=(0,), title="t",
                                 runs=["spt: pretrain.num_steps=2 finetune.num_steps=2"])
  run_dir = tmp_path / "spt" / "seed_0"
  run_dir.mkdir(parents=True)
  (run_dir / "log.txt").write_text("the other process's log\n")
  for processes in (1, 2):
    with workdir_lock.hold(str(run_dir)):
      with pytest.raises(RuntimeError, match=r"spt/seed_0: not run here, another process is "
                                             rf"running it \(pid {os.getpid()}: "):
        sweep.run_sweep(spec, str(tmp_path), processes=processes)
    assert (run_dir / "log.txt").read_text() == "the other process's log\n"
    assert not (run_dir / "results.json").exists() and not (run_dir / "pretrain").exists()
