"""benchmarks/cpu_default_stress.py, tiny: one short main.py run in the default CPU mode
under one competing busy process; the summary line and JSON must come out, and the default must be
one process per core (2 at most) as far as the batches divide. The 40-run figures belong to the script's own runs (benchmarks/README.md)."""
import json
import subprocess
import sys

from conftest import ROOT, load_config
from spt_jax import platform


def test_stress_script_runs_main_py_default_under_load(tmp_path):
  out = tmp_path / "stress.json"
  done = subprocess.run(
      [sys.executable, "benchmarks/cpu_default_stress.py", "--runs", "1", "--load", "1",
       "--expected-s", "12", "--config.finetune.num_steps=10", "--config.finetune.eval_every_steps=10",
       "--out", str(out)],
      capture_output=True, text=True, timeout=150, cwd=ROOT)
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
  last = done.stdout.strip().splitlines()[-1]
  assert last.startswith("runs=1 load=1 aborts=0 hangs=0 ok=1 mean_wall="), done.stdout[-2000:]
  assert "s mean_steps_per_sec=" in last
  report = json.loads(out.read_text())
  summary, (record,) = report["summary"], report["records"]
  # main.py's default: 2 processes of one device each where 2 cores and the batches allow.
  config = load_config("synthetic_scratch", "smoke")
  assert summary["devices"] == [platform.cpu_process_count(config, 2, environ={})]
  assert record["outcome"] == "ok" and record["rc"] == 0 and record["steps_per_sec"] > 0
  assert report["forwarded"] == ["--config.finetune.num_steps=10",
                                 "--config.finetune.eval_every_steps=10"]
