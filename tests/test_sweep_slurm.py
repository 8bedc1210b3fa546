"""The SLURM backend of spt_jax.sweep, driven through submitit's local executor: the same jobs, the
same pickled callable, local processes instead of sbatch."""
import os
import signal
import sys
import threading
import time

import pytest

from spt_jax import config_lib, faults, sweep
from test_sweep import TINY

# A latest checkpoint at step 2 of 4, so that a run killed after it resumes mid-phase.
CHECKPOINTED = f"{TINY} pretrain.checkpoint_every_steps=2 finetune.checkpoint_every_steps=2"
# Once step 4's best checkpoint is saved, before its latest one: the resumed run starts from step 2.
KILL_POINT = "best_saved@4"


def _sweep():
  return config_lib.sweep_config(
      base="configs/synthetic_spt.py:smoke", seeds=(0,), title="tiny",
      runs=[f"from_spt: {CHECKPOINTED} phases=finetune "
            "finetune.init_from.source={workdir}/spt/seed_{seed}/pretrain", f"spt: {CHECKPOINTED}"],
      steps_to=0.5)


def _local_jobs(tmp_path):
  return sweep.Slurm(cluster="local", folder=str(tmp_path / "submitit"), gpus=0, time_min=10,
                     poll_s=0.2)


def test_jobs_wait_for_their_source_resume_after_a_kill_and_match_the_local_runner(tmp_path,
                                                                                   monkeypatch):
  local = sweep.run_sweep(_sweep(), str(tmp_path / "local"))
  # Only the first job of the SPT run dies (SIGKILL, spt_jax/faults.py): submitit hands each job
  # the environment it was submitted with, and the resubmitted one must run to the end.
  submit, submitted = sweep._submit, []

  def submit_first_with_a_kill(executor, run, start):
    with monkeypatch.context() as env:
      if not submitted:
        env.setenv(faults.ENV, KILL_POINT)
      submitted.append(run.name)
      return submit(executor, run, start)

  monkeypatch.setattr(sweep, "_submit", submit_first_with_a_kill)
  rows = sweep.run_sweep(_sweep(), str(tmp_path / "slurm"), slurm=_local_jobs(tmp_path))
  assert submitted == ["spt", "spt", "from_spt"]
  assert rows == local
  for name in ("table.md", "table.csv", "results.json"):
    assert (tmp_path / "slurm" / name).read_text() == (tmp_path / "local" / name).read_text()
  log = (tmp_path / "slurm/spt/seed_0/log.txt").read_text()
  assert log.count("==== sweep attempt") == 2
  assert "resumed from step 2 of" in log.split("==== sweep attempt")[2]
  loaded = sweep.json.load(open(tmp_path / "slurm/from_spt/seed_0/finetune/init_from.json"))
  assert loaded["loaded"] and str(tmp_path / "slurm/spt/seed_0/pretrain") in loaded["source"]
  submitted.clear()  # Finished runs are skipped: nothing is submitted again.
  assert sweep.run_sweep(_sweep(), str(tmp_path / "slurm"), slurm=_local_jobs(tmp_path)) == rows
  assert submitted == []


# Stands in for main.py: exits 0 on SIGTERM, as main.py does once its latest checkpoint is saved.
STAND_IN = """
import pathlib, signal, sys, time
run_dir = pathlib.Path(sys.argv[1])
def stop(*_):
  (run_dir / "stopped").touch()
  sys.exit(0)
signal.signal(signal.SIGTERM, stop)
(run_dir / "ready").touch()
time.sleep(60)
"""


class Requeued(Exception):
  """What submitit's handler does after `checkpoint`: it leaves the job (sys.exit)."""


def test_the_time_limit_signal_stops_main_py_cleanly_and_requeues_the_same_run(tmp_path,
                                                                               monkeypatch):
  monkeypatch.setattr(sweep, "main_py_args",
                      lambda overrides, seed, run_dir, cores=None, threads=0: [sys.executable, "-c",
                                                                   STAND_IN, run_dir])
  run = sweep.SubmittedRun({"config": "c.py"}, 3, str(tmp_path))
  requeues = []

  def submitit_handler(*_):
    requeues.append(run.checkpoint())
    raise Requeued

  def time_limit_ahead():  # SLURM signals the whole job step: the job's process and main.py.
    while not (tmp_path / "ready").exists():
      time.sleep(0.01)
    os.kill(run._process.pid, signal.SIGUSR2)
    os.kill(os.getpid(), signal.SIGUSR2)

  previous = signal.signal(signal.SIGUSR2, submitit_handler)
  try:
    threading.Thread(target=time_limit_ahead, daemon=True).start()
    with pytest.raises(Requeued):
      run()  # what the job executes; interrupted by the handler while main.py runs
  finally:
    signal.signal(signal.SIGUSR2, previous)
  assert (tmp_path / "stopped").exists()  # not killed by SIGUSR2: stopped by SIGTERM, cleanly
  requeued = requeues[0].function
  assert isinstance(requeued, sweep.SubmittedRun) and requeued is not run
  assert (requeued.overrides, requeued.seed, requeued.run_dir) == (run.overrides, 3, str(tmp_path))


def test_slurm_settings_reach_sbatch(tmp_path, monkeypatch):
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  for tool, output in (("srun", ""), ("sbatch", "Submitted batch job 4242")):
    (bin_dir / tool).write_text(f"#!/bin/sh\necho '{output}'\n")
    (bin_dir / tool).chmod(0o755)
  monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
  slurm = sweep.Slurm(folder=str(tmp_path / "jobs"), partition="gpu", time_min=90, gpus=2,
                      cpus_per_task=12, parameters={"account": "proj", "mem_gb": 64})
  run = sweep.Run("spt", {"config": "configs/synthetic_spt.py:smoke"}, 1, str(tmp_path / "spt"),
                  set())
  job = sweep._submit(sweep._executor(slurm), run, 0.0)
  assert job.job_id == "4242"
  script = job.paths.submission_file.read_text()
  for line in ("--partition=gpu", "--time=90", "--gpus-per-node=2", "--cpus-per-task=12",
               "--account=proj", "--mem=64GB", "--job-name=spt/seed_1", "--nodes=1",
               "--signal=USR2@"):
    assert f"#SBATCH {line}" in script, (line, script)


def test_without_submitit_the_slurm_backend_names_the_extra(tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, "submitit", None)
  with pytest.raises(ImportError, match=r"^The SLURM backend needs submitit: "
                                        r"pip install -e '\.\[slurm\]'$"):
    sweep.run_sweep(_sweep(), str(tmp_path), slurm=sweep.Slurm())
  assert not tmp_path.joinpath("spt").exists()
