"""launch/tpu_pod.sh and launch/slurm.sbatch without a cluster: their dry runs for each TPU
generation, the real gcloud parser on every command they print (where gcloud is installed), the
worker side of `run` and `stop` executed here against a stand-in Python, the sbatch script's
requeue logic against stand-in srun and scontrol, and launch/prepare_data.py.
"""
from __future__ import annotations

import concurrent.futures
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, tiny_flags

TPU_POD = os.path.join(ROOT, "launch", "tpu_pod.sh")
SLURM = os.path.join(ROOT, "launch", "slurm.sbatch")
PREPARE = os.path.join(ROOT, "launch", "prepare_data.py")
GENERATIONS = {  # accelerator type: (zone, image) the script must pick for it
    "v4-32": ("us-central2-b", "tpu-ubuntu2204-base"),
    "v5litepod-16": ("us-west4-a", "v2-alpha-tpuv5-lite"),
    "v6e-16": ("us-east1-d", "v2-alpha-tpuv6e"),
}
COMMANDS = ("create", "copy", "setup", "run", "stop", "status", "logs", "recreate", "delete")


def _env(**extra):
  env = {k: v for k, v in os.environ.items()
         if k not in ("ZONE", "RUNTIME_VERSION", "WORKDIR", "BUCKET", "EXTRA_ARGS", "DATA_DIR",
                      "CREATE_FLAGS", "SLURM_JOB_ID", "DRY_RUN")}
  return dict(env, PROJECT="proj", TPU_NAME="pod", **extra)


def _tpu_pod(*args, **env):
  return subprocess.run(["bash", TPU_POD, *args], env=_env(**env), capture_output=True, text=True,
                        timeout=60, cwd=ROOT)


def _dry(command, *args, **env):
  out = _tpu_pod("--dry-run", command, *args, **env)
  assert out.returncode == 0, out.stderr
  return out.stdout.splitlines()


def _remote(line: str) -> str:
  """The shell command a `tpu-vm ssh ... --command=...` line runs on every worker."""
  (command,) = [a[len("--command="):] for a in shlex.split(line) if a.startswith("--command=")]
  return command


@pytest.mark.parametrize("accelerator", sorted(GENERATIONS))
def test_tpu_pod_commands_for_each_generation(accelerator):
  zone, image = GENERATIONS[accelerator]
  lines = _dry("all", "--", "--config.seed=1", BUCKET="bkt", ACCELERATOR_TYPE=accelerator,
               CREATE_FLAGS="--spot")
  where = f"--zone={zone} --project=proj"
  # The zone is asked whether it has the type and the image before anything is created.
  assert lines[0] == f"gcloud compute tpus accelerator-types describe {accelerator} {where}"
  assert lines[1] == f"gcloud compute tpus tpu-vm versions describe {image} {where}"
  assert lines[2] == (f"gcloud compute tpus tpu-vm create pod {where} "
                      f"--accelerator-type={accelerator} --version={image} --spot")
  tar, scp, swap, setup, run = lines[3:]
  assert tar.startswith("tar -C ") and " --exclude=.git " in tar and " --exclude=runs " in tar
  assert scp.startswith("gcloud compute tpus tpu-vm scp ") and scp.endswith("--worker=all")
  # The new copy is unpacked beside the old one and only then swapped in.
  assert re.search(r"tar -C ~/spt_jax\.new .*&& rm -rf ~/spt_jax && mv ~/spt_jax\.new ~/spt_jax",
                   _remote(swap))
  # A Python >= 3.11 environment (uv installs one: the images' python3 is 3.10), kept when present.
  setup = _remote(setup)
  assert "uv venv -q --seed --python 3.11 ~/spt_jax_venv" in setup
  assert re.search(r"~/spt_jax_venv/bin/python -c '.*sys\.version_info < .*\"3\.11\".*' "
                   r"2>/dev/null \|\| \{ rm -rf ~/spt_jax_venv && uv venv", setup)
  assert "uv pip install -q --python ~/spt_jax_venv/bin/python -e '.[gcs]' 'jax[tpu]'" in setup
  # Detached, logged per worker, no second run where one is going.
  run = _remote(run)
  assert "nohup setsid bash -c" in run and "> $log 2>&1 < /dev/null &" in run
  assert "log=~/spt_jax_logs/run-" in run and "ln -sfn $log ~/spt_jax_logs/latest.log" in run
  assert "a run is going" in run
  assert ("main.py --config=configs/listops_spt.py --workdir=gs://bkt/spt_jax/listops_spt "
          "--config.seed=1 >") in run
  assert all(l.startswith(("gcloud ", "tar ")) for l in lines)


def test_tpu_pod_stop_waits_then_kills_and_recreate_starts_over():
  stop = _remote(_dry("stop", STOP_GRACE="120")[0])
  assert re.search(r"kill -TERM \$pid; for i in \$\(seq 600\); do kill -0 \$pid .* break; "
                   r"sleep 0\.2; done", stop)  # 120 s
  assert "kill -KILL $pid" in stop and "is still alive\"; exit 1" in stop
  lines = _dry("recreate", BUCKET="bkt", ACCELERATOR_TYPE="v5litepod-16")
  assert lines[0].startswith("gcloud compute tpus tpu-vm delete pod --zone=us-west4-a")
  assert any("versions describe v2-alpha-tpuv5-lite" in l for l in lines)
  assert "--workdir=gs://bkt/spt_jax/listops_spt" in _remote(lines[-1])
  assert _dry("status")[0].startswith("gcloud compute tpus tpu-vm describe pod ")
  help_text = _tpu_pod("--help").stdout
  assert "ssh-add ~/.ssh/google_compute_engine" in help_text and "recreate" in help_text


@pytest.mark.parametrize("env, message", [
    ({"WORKDIR": "runs/x"}, "WORKDIR=runs/x is relative"),
    ({"ACCELERATOR_TYPE": "v3-8"}, "ACCELERATOR_TYPE=v3-8: not a v4, v5e"),
    ({"PYTHON_VERSION": "3.10"}, "PYTHON_VERSION=3.10: spt_jax needs Python >= 3.11"),
    ({"ZONE": "central"}, "ZONE=central is not a zone name"),
])
def test_tpu_pod_refuses_what_cannot_work(env, message):
  out = _tpu_pod("--dry-run", "all", **env)
  assert out.returncode == 2 and message in out.stderr, out.stderr


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")
def test_every_gcloud_command_passes_the_gcloud_parser(tmp_path):
  """gcloud parses a command before it needs credentials: with an empty configuration, a valid
  command fails for want of an account (exit 1) and an invalid one with a usage error (exit 2)."""
  # Each command line once: every generation's `create`, and the other commands' (which differ by
  # generation only in their values) for v5e; the worker-side scripts of the ssh commands are
  # strings to gcloud, so one stands for all.
  commands = {}
  for accelerator in GENERATIONS:
    for command in COMMANDS if accelerator == "v5litepod-16" else ("create",):
      for line in _dry(command, BUCKET="bkt", ACCELERATOR_TYPE=accelerator, CREATE_FLAGS="--spot"):
        wanted = accelerator == "v5litepod-16" or " tpu-vm create " in line
        if line.startswith("gcloud ") and wanted:
          commands.setdefault(re.sub(r"--command='.*'$", "--command=SCRIPT", line), line)
  commands = set(commands.values())
  env = dict(os.environ, CLOUDSDK_CONFIG=str(tmp_path), CLOUDSDK_CORE_DISABLE_PROMPTS="1")

  def parse(line):
    out = subprocess.run(shlex.split(line), env=env, capture_output=True, text=True, timeout=120)
    return line, out.returncode, out.stderr

  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    for line, code, err in pool.map(parse, sorted(commands)):
      assert code == 1 and "do not currently have an active account" in err, (line, err)
  assert len(commands) == 9, sorted(commands)  # 3 creates, 6 other commands


# A stand-in for the workers' Python: records how it was started, then runs until killed; on
# SIGTERM it "saves" and exits 0, or (FAKE_MODE=ignore) ignores it, as a hung run would.
_FAKE_PYTHON = """#!/usr/bin/env bash
echo "started SPT_JAX_INIT=$SPT_JAX_INIT args: $*"
echo started >> "$HOME/starts"
if [ "${FAKE_MODE:-}" = ignore ]; then
  trap '' TERM
else
  trap 'echo "SIGTERM: saving"; sleep 0.3; echo saved; exit 0' TERM
fi
while :; do sleep 0.1; done
"""


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  # A zombie (not yet reaped by init in this container) counts as gone.
  with open(f"/proc/{pid}/stat") as f:
    return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_tpu_pod_run_and_stop_on_a_worker(tmp_path):
  home = tmp_path / "home"
  (home / "spt_jax").mkdir(parents=True)
  python = home / "spt_jax_venv" / "bin" / "python"
  python.parent.mkdir(parents=True)
  python.write_text(_FAKE_PYTHON)
  python.chmod(0o755)
  run = _remote(_dry("run", BUCKET="bkt")[0])
  stop = _remote(_dry("stop", STOP_GRACE="30")[0])
  impatient_stop = _remote(_dry("stop", STOP_GRACE="1")[0])
  logs = _remote(_dry("logs", LOG_LINES="5")[0])
  pid_file = home / ".spt_jax_run.pid"

  def worker(command, **env):
    return subprocess.run(["bash", "-c", command], env=dict(os.environ, HOME=str(home), **env),
                          capture_output=True, text=True, timeout=60)

  def wait_for(condition, what):
    deadline = time.time() + 20
    while not condition() and time.time() < deadline:
      time.sleep(0.05)
    assert condition(), what

  pids = []
  try:
    started = worker(run)
    assert started.returncode == 0 and "started pid" in started.stdout, started
    pids.append(int(pid_file.read_text()))
    assert _alive(pids[-1])
    log = home / "spt_jax_logs" / "latest.log"
    wait_for(lambda: log.exists() and "started" in log.read_text(), "no log")
    assert ("SPT_JAX_INIT=1 args: main.py --config=configs/listops_spt.py "
            "--workdir=gs://bkt/spt_jax/listops_spt") in log.read_text()
    # What gcloud does when ssh exits 255: the same command again. It starts nothing.
    again = worker(run)
    assert again.returncode == 0 and f"a run is going (pid {pids[-1]})" in again.stdout
    assert (home / "starts").read_text().count("started") == 1
    assert "started SPT_JAX_INIT=1" in worker(logs).stdout

    stopped = worker(stop)
    assert stopped.returncode == 0 and f"run {pids[-1]} stopped" in stopped.stdout, stopped
    assert "SIGKILL" not in stopped.stdout and not _alive(pids[-1]) and not pid_file.exists()
    assert "saved" in log.read_text()

    # A run that ignores SIGTERM is killed after STOP_GRACE, and stop confirms it is gone.
    assert worker(run, FAKE_MODE="ignore").returncode == 0
    pids.append(int(pid_file.read_text()))
    wait_for(lambda: "started" in log.read_text(), "no second log")
    start = time.time()
    killed = worker(impatient_stop)
    assert killed.returncode == 0, killed
    assert "still going after 1 s: SIGKILL" in killed.stdout, killed.stdout
    assert f"run {pids[-1]} stopped" in killed.stdout and time.time() - start >= 1
    assert not _alive(pids[-1]) and not pid_file.exists()
    assert "no run recorded" in worker(stop).stdout
  finally:
    for pid in pids:
      if _alive(pid):
        os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------------------------- SLURM

def test_slurm_dry_run_prepares_once_then_trains_then_requeues_if_stopped():
  env = _env(DRY_RUN="1", CONFIG="configs/listops_spt.py:smoke", EXTRA_ARGS="--config.seed=2",
             SLURM_JOB_ID="4242")
  out = subprocess.run(["bash", SLURM, "--config.model.num_layers=1"], env=env,
                       capture_output=True, text=True, timeout=30)
  assert out.returncode == 0, out.stderr
  _, prepare, train, finished = out.stdout.splitlines()
  main_args = ("--config=configs/listops_spt.py:smoke --workdir=runs/listops_spt_smoke "
               "--config.seed=2 --config.model.num_layers=1")
  # The default workdir has no job id: a requeued or resubmitted job resumes from it.
  assert prepare == (f"srun --nodes=1 --ntasks=1 --cpu-bind=none python launch/prepare_data.py "
                     f"{main_args} ")
  assert train == (f"srun --kill-on-bad-exit=1 --cpu-bind=none env SPT_JAX_INIT=1 python main.py "
                   f"{main_args} ")
  assert finished == (f"python launch/prepare_data.py --finished {main_args} "
                      f"# exit 3: scontrol requeue 4242")
  header = open(SLURM).read()
  for line in (r"--ntasks-per-node=\d+", r"--nodes=\d+", r"--signal=TERM@\d+", "--requeue",
               "--open-mode=append"):
    assert re.search(rf"^#SBATCH {line}$", header, re.M), line


# Stand-ins on PATH: srun runs its command (options dropped), scontrol records its arguments,
# python plays prepare_data.py and main.py as FAKE_* say.
_FAKE_BIN = {
    "srun": """#!/usr/bin/env bash
while [[ "$1" == --* ]]; do shift; done
exec "$@"
""",
    "scontrol": """#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
""",
    "python": """#!/usr/bin/env bash
echo "python $*" >> "$FAKE_LOG"
case "$1 $2" in
  "launch/prepare_data.py --finished") exit "${FAKE_FINISHED:-0}" ;;
  launch/prepare_data.py*) exit 0 ;;
  main.py*) sleep "${FAKE_TRAIN_S:-0}"; exit "${FAKE_TRAIN_STATUS:-0}" ;;
esac
exit 99
""",
}


@pytest.mark.parametrize("train_status, finished, want_status, want_requeue", [
    (0, 3, 0, True),    # stopped at the time limit's signal, saved: requeued
    (0, 0, 0, False),   # finished
    (1, 3, 1, False),   # failed: never requeued (it would fail again)
])
def test_slurm_requeues_a_run_that_stopped_before_its_end(tmp_path, train_status, finished,
                                                          want_status, want_requeue):
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  for name, text in _FAKE_BIN.items():
    (bin_dir / name).write_text(text)
    (bin_dir / name).chmod(0o755)
  log = tmp_path / "calls"
  env = _env(PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_LOG=str(log), SLURM_JOB_ID="4242",
             FAKE_FINISHED=str(finished), FAKE_TRAIN_STATUS=str(train_status), FAKE_TRAIN_S="1",
             REPO_DIR=ROOT, VENV=str(tmp_path / "no_venv"))
  proc = subprocess.Popen(["bash", SLURM], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, cwd=ROOT)
  # While training runs, SLURM signals the batch shell too (preemption): it must keep waiting.
  deadline = time.time() + 20
  while time.time() < deadline and not (log.exists() and "main.py" in log.read_text()):
    time.sleep(0.05)
  proc.send_signal(signal.SIGTERM)
  _, err = proc.communicate(timeout=30)
  assert proc.returncode == want_status, err
  assert "slurm.sbatch: SIGTERM: the tasks save and stop" in err
  calls = log.read_text().splitlines()
  assert calls[0].startswith("python launch/prepare_data.py --config=configs/listops_spt.py ")
  assert calls[1] == "python main.py --config=configs/listops_spt.py --workdir=runs/listops_spt"
  assert ("requeue 4242" in calls) == want_requeue, calls
  assert calls[-1] == "requeue 4242" or not want_requeue


# ------------------------------------------------------------------------------- prepare_data

def test_prepare_data_generates_the_data_once_and_tells_a_finished_run(tmp_path, spt_run):
  cache = tmp_path / "cache"
  flags = [a for a in tiny_flags(str(cache)) if not a.startswith("--config.data.cache_dir=")]
  base = [sys.executable, PREPARE, "--config=configs/listops_spt.py",
          f"--config.data.cache_dir={cache}", *flags]
  run = lambda *args: subprocess.run([*base, *args], capture_output=True, text=True, timeout=240,
                                     cwd=ROOT)
  out = run(f"--workdir={tmp_path / 'w'}")
  assert out.returncode == 0, out.stderr[-3000:]
  assert re.search(r"prepare_data: config\.data: listops \(train 64, val 20, test 20\) from "
                   + re.escape(str(cache)), out.stdout), out.stdout
  assert len(os.listdir(cache)) == 1
  assert run("--finished", f"--workdir={tmp_path / 'w'}").returncode == 3
  assert run("--finished", f"--workdir={spt_run[0]}").returncode == 0
