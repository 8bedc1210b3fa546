"""benchmarks/train_step.py end to end on the cpu shape, tiny: issue 7's tables must keep working.

Runs in a subprocess because the benchmark, like main.py, sets process-wide state first (malloc
settings, the CPU device count). Speeds are not asserted (they belong to the benchmark's own runs on
an idle machine); what is asserted is that every column the issue asks for is measured or says why not.
"""
import json
import math
import subprocess
import sys

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
