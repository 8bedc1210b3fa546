"""A run as Python objects: load_run's evaluation is the trainer's, bit for bit."""
import numpy as np
import pytest

from spt_jax import surgery
from spt_jax.runs import load_run


def test_load_run_evaluates_as_the_trainer_did_and_predicts(spt_run):
  workdir, _, results = spt_run
  for phase in ("finetune", "pretrain"):
    run = load_run(workdir, phase)
    assert run.evaluate("test") == results[phase]["test_of_best"], phase
    assert run.results["test_of_best"] == results[phase]["test_of_best"]
  run = load_run(workdir)  # the last phase by default
  assert run.phase == "finetune" and run.checkpoint_dir.endswith("params")
  inputs = run.splits["test"]["inputs"][:5]
  logits = run.predict(inputs, batch_size=2)
  assert logits.shape == (5, run.task.num_classes)
  np.testing.assert_allclose(logits, run.predict(inputs, batch_size=5), rtol=1e-5, atol=1e-6)
  # Surgery, then evaluation: a zeroed classifier kernel predicts the bias's class everywhere.
  run.params = surgery.reinit(run.params, ["classifier/kernel"], std=0.0)
  labels = run.splits["test"]["labels"]
  majority = int(np.argmax(np.asarray(run.params["classifier"]["bias"])))
  assert run.evaluate("test")["accuracy"] == pytest.approx(np.mean(labels == majority), abs=1e-6)


def test_load_run_names_what_is_missing(spt_run, tmp_path):
  with pytest.raises(FileNotFoundError, match="not a run directory"):
    load_run(str(tmp_path))
  with pytest.raises(FileNotFoundError, match="has no phase 'finetun'"):
    load_run(spt_run[0], "finetun")
