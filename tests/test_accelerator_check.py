"""benchmarks/accelerator_check.sh in its dry mode (--platform=cpu): the very steps it runs on a GPU
or TPU, with tiny shapes, so that the one prepared device check cannot rot between device sessions.

Speeds are not asserted (a dry run measures nothing); what is asserted is that every step ran and
that the JSON and the markdown table hold every field the check reports on a device.
"""
import glob
import json
import os
import re
import subprocess
import sys

from conftest import ROOT

SCRIPT = os.path.join(ROOT, "benchmarks", "accelerator_check.sh")
SHAPES = ("listops", "pathfinder", "retrieval")


def _run(*args, timeout=240):
  return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, timeout=timeout,
                        cwd=ROOT, env=dict(os.environ, PYTHON=sys.executable))


def test_dry_mode_runs_every_step_and_reports_them(tmp_path):
  out = tmp_path / "check"
  done = _run("--platform=cpu", f"--out={out}")
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  report = json.loads((out / "accelerator_check.json").read_text())
  assert report["passed"] and report["failures"] == [] and report["dry_run"]
  assert report["platform"] == "cpu" and report["device"]["backend"] == "cpu"
  assert report["wall_s"] <= report["budget_s"]
  stages = {s["stage"]: s for s in report["stages"]}
  assert list(stages) == ["install", "tests", "benchmark", "data", "run"], stages
  assert stages["install"]["status"] == "skipped"
  assert all(stages[s]["status"] == "passed" for s in ("tests", "benchmark", "data", "run")), stages
  # The device tests were collected and skip here, by name, with their reason.
  tests = report["device_tests"]
  names = " ".join(t["test"] for t in tests["tests"])
  assert "test_cudnn_matches_dense_with_padding_and_causal_mask" in names
  assert "test_bf16_loss_parity_on_the_device" in names
  assert tests["counts"]["skipped"] == len(tests["tests"]) >= 5
  assert all(t["reason"].startswith("needs a") for t in tests["tests"])
  # One benchmark row per LRA shape (the dry mode times pretraining steps only), with its MFU against
  # the peak (here this CPU's measured matmul rate; on a device the PEAKS table's).
  peak = report["peak"]
  assert peak["tflops"] > 0 and "measured" in peak["source"]
  rows = {r["shape"]: r for r in report["benchmark"]}
  assert sorted(rows) == sorted(SHAPES) and all(r["kind"] == "pretrain" for r in rows.values())
  for r in rows.values():
    assert "missing" not in r, r
    assert r["model"] == "1x32" and r["dtype"] == "bfloat16" and r["batch"] == 2
    assert r["ms_per_step"] > 0 and r["tokens_per_s"] > 0 and r["analytic_tflop_per_step"] > 0
    assert 0 < r["mfu"] < 1, r
  # The listops_spt.py run: its tiny 40 steps, logged every 5, and a falling loss.
  run = report["run"]
  assert run["steps"] == 40 and run["logged_steps"] == list(range(5, 41, 5)), run
  assert run["loss_falls"] and run["last_quarter_loss"] < run["first_loss"]
  assert run["median_steps_per_s"] > 0
  table = (out / "accelerator_check.md").read_text()
  assert "**PASSED**" in table and "dry mode on CPU" in table
  for heading in ("## Steps", "## Device tests", "## Train step", "## configs/listops_spt.py run"):
    assert heading in table, heading
  for shape in SHAPES:
    assert re.search(rf"\| {shape} \| pretrain \| 1x32 \| 64 \| 2 \| bfloat16 \| [\d.,]+ \| [\d,]+ \|",
                     table), shape
  assert re.search(r"\| 40 \| [\d.]+ \| [\d.]+ \| yes \|", table)
  for log in ("install", "device_tests", "train_step", "data", "listops_run"):
    assert (out / "logs" / f"{log}.log").exists(), log


def test_bad_arguments_are_named():
  done = _run("--platform=gpu", "--out=/tmp/unused", timeout=30)
  assert done.returncode == 2 and "--platform=gpu must be cuda, tpu or cpu" in done.stderr
  done = _run("--platform=cpu", f"--out={ROOT}", timeout=30)
  assert done.returncode == 2 and "is not empty" in done.stderr
  done = _run("--platform=cpu", timeout=30)
  assert done.returncode == 2 and "--out=DIR is required" in done.stderr


def test_the_script_runs_every_test_file_with_accelerator_tests():
  script = open(SCRIPT).read()
  listed = set(re.search(r'^ACCELERATOR_TESTS="([^"]*)"', script, re.M).group(1).split())
  marked = {os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "tests", "test_*.py"))
            if "pytest.mark.accelerator" in open(p).read()}
  marked.discard("tests/test_accelerator_check.py")  # names the marker, has none
  assert marked and marked == listed, (marked, listed)
