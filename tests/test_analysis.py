import json
import os
import shutil

import numpy as np
import pytest
from pytest import approx
from conftest import ROOT, load_config, load_script, tiny

from spt_jax import analysis, checkpoints, experiment, train
from spt_jax.analysis import attention
from spt_jax.data import tasks
from spt_jax.analysis.__main__ import analyse

L = 12


def _metrics(weights, mask=None, band=1):
  return {k: float(v) for k, v in attention.proximity_metrics(weights, mask, band).items()}


def test_proximity_metrics_on_hand_built_matrices():
  identity = _metrics(np.eye(L, dtype=np.float32))
  assert identity == {"mean_distance": 0.0, "band_mass": 1.0, "diagonality": 1.0}
  uniform = _metrics(np.full((L, L), 1 / L, np.float32))
  assert abs(uniform["diagonality"]) < 1e-6
  assert abs(uniform["band_mass"] - (3 * L - 2) / L**2) < 1e-6
  i = np.arange(L)
  banded = (np.abs(i[:, None] - i[None, :]) == 1).astype(np.float32)
  banded /= banded.sum(1, keepdims=True)
  b = _metrics(banded)
  assert abs(b["mean_distance"] - 1.0) < 1e-6 and abs(b["band_mass"] - 1.0) < 1e-6
  uniform_distance = np.abs(i[:, None] - i[None, :]).mean()
  assert abs(b["diagonality"] - (1 - 1 / uniform_distance)) < 1e-6
  anti = np.zeros((L, L), np.float32)
  anti[i, L - 1 - i] = 1
  anti[L // 2 - 1, :], anti[L // 2, :] = 0, 0
  anti[L // 2 - 1, 0], anti[L // 2, L - 1] = 1, 1
  assert _metrics(anti)["diagonality"] < 0


def test_normalised_entropy_tells_sharp_distant_attention_from_uniform():
  assert abs(attention.normalised_entropy(np.full((L, L), 1 / L)) - 1) < 1e-9
  assert attention.normalised_entropy(np.eye(L)) == 0
  # Sharp attention to distant keys: no band mass at all (less than uniform's), entropy 0.
  far = np.zeros((L, L))
  far[np.arange(L), (np.arange(L) + L // 2) % L] = 1
  assert attention.normalised_entropy(far) == 0 and _metrics(far)["band_mass"] == 0
  # Only real rows and keys count: uniform over the 6 real keys is 1.
  weights = np.zeros((1, L, L))
  weights[0, :, :6] = 1 / 6
  assert abs(attention.normalised_entropy(weights, np.arange(L)[None] < 6) - 1) < 1e-9


def test_padding_rows_and_keys_are_excluded():
  weights = np.full((1, 1, L, L), 0.0, np.float32)
  real = 6
  weights[0, 0, :, :real] = np.eye(L, real, dtype=np.float32) + 0
  weights[0, 0, real:, :real] = 1 / real  # padded queries: ignored whatever they hold
  mask = np.arange(L)[None] < real
  m = _metrics(weights, mask)
  assert m["mean_distance"] == 0.0 and m["diagonality"] == 1.0


def test_cli_analysis_of_spt_and_scratch_checkpoints(spt_run, tmp_path):
  workdir = spt_run[0]
  for phase, checkpoint in (("finetune", "best"), ("finetune", "init"), ("pretrain", "best")):
    out = tmp_path / f"{phase}_{checkpoint}"
    result = analyse(os.path.join(workdir, phase), checkpoint, str(out), "val", 4, 1)
    assert {"attention_layer0.png", "position_layer0.png", "metrics.json"} <= set(os.listdir(out))
    saved = json.load(open(out / "metrics.json"))
    assert saved["layers"][0]["overall"] == result["layers"][0]["overall"]
    assert len(saved["layers"][0]["heads"]) == 2
    assert -1 <= saved["layers"][0]["overall"]["diagonality"] <= 1
    # PR of the pooled encoder output, and against the loaded (init) parameters ENSD.
    representation = saved["representation"]
    names = ["init", "best"] if checkpoint == "best" else ["init"]
    assert list(representation["pr"]) == names and "representation.png" in os.listdir(out)
    assert all(1 <= v <= 16 for v in representation["pr"].values())  # d_model 16
    if checkpoint == "best":
      assert 0 < representation["ensd"]["init|best"] <= 16


def test_attention_metrics_are_logged_during_training(tmp_path, cache_dir):
  """experiment.py hands `attention.tracker` to the trainer (which imports no analysis)."""
  config = tiny(load_config("listops_scratch"), cache_dir)
  config.finetune.attention_metrics_every_steps = 3
  experiment.run(config, str(tmp_path))
  rows = [json.loads(line) for line in open(tmp_path / "finetune" / "metrics.jsonl")]
  tracked = [r for r in rows if r["split"] == "attention"]
  assert [r["step"] for r in tracked] == [3, 6]
  for r in tracked:
    assert set(r) >= {"layer0/mean_distance", "layer0/band_mass", "layer0/diagonality"}
    assert -1 <= r["layer0/diagonality"] <= 1


def test_plateau_attention_table_reads_a_finished_run(spt_run, tmp_path):
  # scripts/lra_plateau_attention.py over a workdir laid out as the plateau study's (task/arm/seed).
  import importlib.util
  spec = importlib.util.spec_from_file_location(
      "lra_plateau_attention", os.path.join(ROOT, "scripts", "lra_plateau_attention.py"))
  script = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(script)
  run = tmp_path / "listops" / "spt" / "seed_0"
  shutil.copytree(spt_run[0], run)  # a copy: the row is kept in the run's directory
  (row,) = script.table(str(tmp_path), "listops")
  # Kept with the best step it was measured at, and read back once the checkpoints are gone (a run
  # restored from scripts/run_records.py's records, which keep the row and not the checkpoints).
  kept = json.load(open(run / "finetune" / script.ROW_FILE))
  assert kept["best_step"] > 0 and all(row[k] == (v, 0.0) for k, v in kept["row"].items())
  shutil.rmtree(run / "finetune" / "checkpoints")
  assert script.table(str(tmp_path), "listops") == [row]
  os.remove(run / "finetune" / script.ROW_FILE)
  assert script.table(str(tmp_path), "listops") == []  # neither: left out, with a warning
  assert row["arm"] == "spt" and row["seeds"] == 1
  assert "band_2d" not in row  # tokens: no grid
  # The best fine-tuning checkpoint's attention, every layer: as the analysis module computes it.
  finetune = os.path.join(spt_run[0], "finetune")
  config, phase = analysis.read_phase_config(finetune)
  task = tasks.load(config.data)
  model = train.make_objective(config, phase, task).attention_model
  tokens = task.splits["val"]["inputs"][:script.EXAMPLES].astype(np.int32)
  params = checkpoints.restore_item(checkpoints.resolve_params_dir(finetune, "best"))
  maps = attention.attention_maps(model, params, tokens)
  expected = np.mean([attention.proximity_metrics(np.asarray(m), tokens != 0, 1)["band_mass"]
                      for m in maps])
  np.testing.assert_allclose(row["band_1d"][0], expected, rtol=1e-6)
  assert 0 < row["band_1d_loaded"][0] < 1  # the hand-off's attention, an SPT arm's starting point
  assert row["test_accuracy"][0] == spt_run[2]["finetune"]["test_of_best"]["accuracy"]
  assert "| spt | 1 |" in script.markdown([row], "listops")


def test_plateau_attention_table_never_loses_an_earlier_row():
  # An arm the workdir can no longer measure (restored from records without its row) or measures
  # on fewer seeds keeps the earlier table's row; the rest are the workdir's, in the study's order.
  script = load_script("lra_plateau_attention")
  row = lambda arm, seeds, band: {"arm": arm, "seeds": seeds, "band_1d": [band, 0.0]}
  previous = [row("spt", 3, 0.1), row("scratch", 3, 0.2), row("qk", 1, 0.3)]
  measured = [row("qk", 3, 0.4), row("scratch", 2, 0.5), row("spt_1L", 1, 0.6)]
  merged = script.merge(previous, measured, "pathfinder")
  assert [(r["arm"], r["seeds"], r["band_1d"][0]) for r in merged] == [
      ("spt", 3, 0.1), ("scratch", 3, 0.2), ("qk", 3, 0.4), ("spt_1L", 1, 0.6)]


def test_ablation_zeroes_query_key_scores_and_reports_the_trainers_numbers(spt_run):
  """`python -m spt_jax.analysis.ablation`: unablated, the trainer's own test metrics; with `qk`
  zeroed every score is 0, so attention is uniform over each sequence's real tokens."""
  from spt_jax import surgery
  from spt_jax.analysis import ablation
  run = os.path.join(spt_run[0], "finetune")
  result = ablation.ablate(run, zero=("qk", r"encoder/layer_0/mlp/.*"))
  trained = json.load(open(os.path.join(run, "results.json")))["test_of_best"]
  for k, v in result["metrics"].items():
    np.testing.assert_allclose(v, trained[k], rtol=1e-6)
  assert sorted(result["ablations"]["qk"]["paths"]) == [
      "encoder/layer_0/attention/key/kernel", "encoder/layer_0/attention/query/bias",
      "encoder/layer_0/attention/query/kernel"]
  assert all(0 <= m["accuracy"] <= 1 for m in (a["metrics"] for a in result["ablations"].values()))

  config, phase = analysis.read_phase_config(run)
  task = tasks.load(config.data)
  model = train.make_objective(config, phase, task).attention_model
  params = surgery.rescale(checkpoints.restore_item(checkpoints.resolve_params_dir(run, "best")),
                           ["qk"], 0.0)
  tokens = task.splits["val"]["inputs"][:4].astype(np.int32)
  real = (tokens != 0)[:, None, None, :]
  for weights in attention.attention_maps(model, params, tokens):
    expected = real / real.sum(-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(weights), np.broadcast_to(expected, weights.shape),
                               atol=1e-6)
  try:
    ablation.ablate(run, zero=("encoder/nothing_here",))
  except ValueError as e:
    assert "encoder/nothing_here" in str(e)
  else:
    raise AssertionError("a pattern matching nothing must raise")


def test_logit_alignment_reads_the_temperature_a_rescale_sets(spt_run):
  """Scores equal up to a factor and a per-row constant (which the softmax ignores) give that
  factor and correlation 1; padded keys are left out; unrelated scores correlate near 0. On a
  pre-LN model, rescaling the whole encoder by c multiplies layer 0's logits by c⁴: the norm's
  scale, W_Q and W_K each carry c (exactly without the biases, which add lower powers, and
  without fixed position codes, which the rescale does not scale: with them the pattern changes
  too, as the embedding's share of the normalised input does)."""
  from spt_jax import surgery
  rng = np.random.default_rng(0)
  ref = rng.normal(size=(2, 3, L, L))
  mask = np.arange(L)[None] < np.array([[L], [7]])
  padded = lambda x: np.where(mask[:, None, None, :], x, np.finfo(np.float32).min)  # noqa: E731
  scaled = 3.0 * ref + rng.normal(size=(2, 3, L, 1))
  aligned = attention.logit_alignment(padded(ref), padded(scaled), mask)
  assert aligned["slope"] == approx(3.0) and aligned["correlation"] == approx(1.0)
  assert abs(attention.logit_alignment(ref, rng.normal(size=ref.shape))["correlation"]) < 0.1
  with pytest.raises(ValueError, match="one shape"):
    attention.logit_alignment(ref, ref[0])

  run = os.path.join(spt_run[0], "finetune")
  config, phase = analysis.read_phase_config(run)
  task = tasks.load(config.data)
  model = train.make_objective(config, phase, task).attention_model
  params = checkpoints.restore_item(checkpoints.resolve_params_dir(run, "best"))
  tokens = task.splits["val"]["inputs"][:4].astype(np.int32)
  slope = lambda model, params: attention.logit_alignment(  # noqa: E731
      np.asarray(attention.attention_logits(model, params, tokens)[0]),
      np.asarray(attention.attention_logits(model, surgery.rescale(params, ["encoder"], 0.5),
                                            tokens)[0]), tokens != 0)
  bare = surgery.rescale(params, [r"encoder/layer_0/(norm_attention|attention/query)/bias"], 0.0)
  aligned = slope(model.with_options(position="none"), bare)
  assert aligned["slope"] == approx(0.5 ** 4, rel=1e-3)
  assert aligned["correlation"] == approx(1.0, abs=1e-5)
  with_codes = slope(model, params)  # c·embedding + fixed codes: the mix the norm sees changes
  assert with_codes["correlation"] < 0.99 and 0 < with_codes["slope"] < 0.5 ** 2
