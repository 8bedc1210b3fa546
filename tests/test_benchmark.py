"""benchmarks/train_step.py end to end on the cpu shape, tiny: issue 7's tables must keep working.

Runs in a subprocess because the benchmark, like main.py, sets process-wide state first (malloc
settings, the CPU device count). Speeds are not asserted (they belong to the benchmark's own runs on
an idle machine); what is asserted is that every column the issue asks for is measured or says why not.
"""
import json
import math
import os
import subprocess
import sys

import pytest
from conftest import ROOT


def test_train_step_benchmark_reports_every_column(tmp_path):
  done = subprocess.run(
      [sys.executable, "benchmarks/train_step.py", "--shapes", "cpu", "--tiny", "--batch", "2",
       "--steps", "1", "--warmup", "0", "--no-torch-compile", "--out", str(tmp_path)],
      capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
  report = json.loads((tmp_path / "train_step.json").read_text())
  assert [(r["shape"], r["kind"]) for r in report["results"]] == [("cpu", "pretrain"),
                                                                    ("cpu", "finetune")]
  for r in report["results"]:
    assert r["jax_tok_s"] > 0 and 0 < r["jax_mfu_analytic"] < math.inf and r["jax_compile_s"] > 0
    # The input pipeline must never be what the step waits for.
    assert r["input_batches_s"] > 10 * r["step_batches_s"], r
    # PyTorch is an optional extra: measured with its ratio, or the reason it is missing.
    notes = r["torch_notes"]  # {implementation: why it has no numbers}
    if "torch_eager_tok_s" in r:
      assert r["torch_eager_tok_s"] > 0 and r["torch_eager_speedup"] > 0 and "torch_eager" not in notes
    else:
      assert notes.get("torch_eager"), notes
    assert "torch_compiled_tok_s" not in r and notes.get("torch_compiled"), notes
  table = (tmp_path / "train_step.md").read_text()
  assert "| cpu | pretrain | 64 | 2 (32) |" in table and "eager÷JAX" in table and "MFU" in table


def test_concurrent_mode_runs_each_copy_confined_to_its_own_core(tmp_path):
  """--concurrent=2: two copies at once, each in one-core mode (--cores) on the sweep runner's slot,
  their rows in one table; the study's pixel shape with its 256-way pixel loss."""
  done = subprocess.run(
      [sys.executable, "benchmarks/train_step.py", "--shapes", "study_pathfinder", "--tiny",
       "--batch", "2", "--steps", "1", "--warmup", "0", "--kinds", "pretrain",
       "--no-torch", "--concurrent", "2", "--out", str(tmp_path)],
      capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
  slots = [tuple(s) for s in __import__("spt_jax.platform").platform.core_slots(2)]
  for i, slot in enumerate(slots):
    report = json.loads((tmp_path / f"process_{i}" / "train_step.json").read_text())
    assert report["machine"]["usable_cores"] == len(slot)
    assert report["settings"]["cores"] == ",".join(map(str, slot))
    (row,) = report["results"]
    assert row["shape"] == "study_pathfinder" and row["jax_tok_s"] > 0
  table = (tmp_path / "train_step_concurrent.md").read_text()
  assert table.count("| study_pathfinder | pretrain |") == 2, table


def test_thunk_report_counts_concurrency_exactly():
  sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
  import step_profile
  ms = 1_000_000
  pool_a, pool_b = "/host:CPU/tf_XLAEigen/1", "/host:CPU/tf_XLAEigen/2"
  events = [("/host:CPU/python", 0, 10 * ms, step_profile.STEP_EVENT),
            ("/host:CPU/python", 0, 9 * ms, "$train_step"),               # dispatch, not work
            (pool_a, 0, 10 * ms, "ThunkExecutor::Execute"),               # a bracket, not a thunk
            (pool_a, 1 * ms, 5 * ms, "ynn_fusion.3"),
            (pool_a, 5 * ms, 9 * ms, "while.1"), (pool_a, 6 * ms, 7 * ms, "add_fusion.2"),  # body
            (pool_b, 3 * ms, 6 * ms, "ynn_fusion.7"),
            (pool_b, 12 * ms, 13 * ms, "copy.1")]                        # after the step
  r = step_profile.thunk_report(events, top=5)
  # 0 thunks in [0,1) and [9,10), 1 in [1,3) and [6,9), 2 in [3,6).
  assert r["thunks_at_once_share"] == pytest.approx({0: 0.2, 1: 0.5, 2: 0.3})
  assert r["thread_busy_share"] == pytest.approx([0.8, 0.3])
  assert r["thunk_ms_per_step"] == pytest.approx(11.0)
  assert r["top_thunks"][0] == dict(name="ynn_fusion", ms_per_step=pytest.approx(7.0), per_step=2.0)
  assert {t["name"] for t in r["top_thunks"]} == {"ynn_fusion", "while"}


def test_step_profile_traces_xla_thunks(tmp_path):
  out = tmp_path / "profile.json"
  done = subprocess.run(
      [sys.executable, "benchmarks/step_profile.py", "--tiny", "--kinds", "pretrain", "--steps",
       "2", "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
  (r,) = json.loads(out.read_text())
  assert r["step_ms"] > 0 and r["cores_busy"] > 0 and r["thunk_ms_per_step"] > 0
  assert math.isclose(sum(r["thunks_at_once_share"].values()), 1.0, rel_tol=1e-6)
  # The matmuls are XLA:CPU thunks of their own: the per-thunk trace events were on.
  assert any(t["name"] in ("ynn_fusion", "dot", "xnn_fusion") for t in r["top_thunks"]), r
  assert "thunks running at once" in done.stdout
