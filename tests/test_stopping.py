"""Phases that stop on a validation plateau (resumably, under the cap), checkpoints selected on
validation loss, and the analytic training-FLOP count."""
import json
import math
import os
import signal
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import ROOT, as_flags, load_config, load_script, tiny
from spt_jax import checkpoints, experiment, flops, stopping, tree
from spt_jax.models import transformer

PLATEAU = dict(patience=2, min_delta=0.02, metric="loss")


def _plateau_config(cache_dir, steps=60, **plateau):
  config = tiny(load_config("listops_scratch"), cache_dir, steps)
  config.finetune.learning_rate = 3e-3
  config.finetune.stop_on_plateau.update(**(plateau or PLATEAU))
  return config


def _val(workdir, key):
  return [(r["step"], r[key]) for r in map(json.loads, open(os.path.join(workdir, "finetune",
                                                                      "metrics.jsonl")))
          if r["split"] == "val"]


def _final_params(workdir):
  latest = os.path.join(workdir, "finetune", "checkpoints", "latest")
  step = max(os.listdir(latest), key=int)
  return tree.flatten(checkpoints.restore_item(os.path.join(latest, step, "params")))


def test_plateau_stops_at_the_same_step_with_kills_and_the_cap_binds(tmp_path, cache_dir):
  reference = str(tmp_path / "reference")
  config = _plateau_config(cache_dir)
  done = experiment.run(config, reference)["finetune"]
  stop = done["stopped_at_step"]
  assert 0 < stop < 60 and done["stop_reason"].startswith("plateau: validation loss"), done
  losses = [v for _, v in _val(reference, "loss")]
  # Stopped at the second validation in a row without a 0.02 improvement on the best loss so far.
  best = min(losses[:-2])
  assert all(v > best - 0.02 for v in losses[-2:]) and len(losses) == stop // 3
  assert done["train_flops"] == done["train_flops_per_step"] * stop

  workdir = str(tmp_path / "killed")
  args = ["--config=configs/listops_scratch.py", f"--workdir={workdir}", "--cpu_processes=1",
          *as_flags(config, load_config("listops_scratch"))]
  for kill_at in ("latest_saving@6", "plateau_stopped"):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "main.py"), *args], cwd=ROOT,
                         env=dict(os.environ, SPT_JAX_KILL_AT=kill_at), capture_output=True,
                         text=True, timeout=240)
    assert out.returncode == -signal.SIGKILL, (kill_at, out.returncode, out.stderr[-3000:])
  out = subprocess.run([sys.executable, os.path.join(ROOT, "main.py"), *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=240)
  assert out.returncode == 0, out.stderr[-3000:]
  got = json.load(open(os.path.join(workdir, "results.json")))["finetune"]
  for key in ("stopped_at_step", "stop_reason", "best_val", "test_of_best", "train_flops"):
    assert got[key] == done[key], key
  assert _val(workdir, "loss") == _val(reference, "loss")
  a, b = _final_params(reference), _final_params(workdir)
  assert all(np.array_equal(a[k], b[k]) for k in a)

  capped = _plateau_config(cache_dir, steps=9, patience=100)
  result = experiment.run(capped, str(tmp_path / "capped"))["finetune"]
  assert (result["stopped_at_step"], result["stop_reason"]) == (9, "cap")

  # A level the loss never passes keeps the rule from counting: the same run goes on to the cap.
  unarmed = _plateau_config(cache_dir, **PLATEAU, after_passing=min(losses) - 0.5)
  result = experiment.run(unarmed, str(tmp_path / "unarmed"))["finetune"]
  assert (result["stopped_at_step"], result["stop_reason"]) == (60, "cap")
  assert _val(str(tmp_path / "unarmed"), "loss")[:len(losses)] == _val(reference, "loss")


def test_selection_on_validation_loss_picks_the_lowest(tmp_path, cache_dir):
  config = tiny(load_config("listops_scratch"), cache_dir, 9)
  config.finetune.update(learning_rate=3e-3, select_on="loss")
  done = experiment.run(config, str(tmp_path))["finetune"]
  step, loss = min(_val(str(tmp_path), "loss"), key=lambda r: r[1])
  assert done["selection_metric"] == "loss"
  assert (done["best_val"]["step"], done["best_val"]["loss"]) == (step, loss)


@pytest.mark.parametrize("field, value, message", [
    ("stop_on_plateau.patience", -1, r"config.finetune.stop_on_plateau.patience=-1 must be >= 0"),
    ("stop_on_plateau.patience", 1.5, r"must be a whole number of validations"),
    ("stop_on_plateau.min_delta", -0.1, r"min_delta=-0.1 must be >= 0"),
    ("stop_on_plateau.metric", "los", r"config.finetune.stop_on_plateau.metric='los' is not a "
                                      r"validation metric of objective 'classification'; it "
                                      r"reports \['accuracy', 'loss'\]"),
    ("select_on", "r2", r"config.finetune.select_on='r2' is not a validation metric"),
    ("stop_on_plateau.after_passing", 0.55, r"after_passing=0.55 needs "
                                            r"stop_on_plateau.patience > 0"),
    ("stop_on_plateau.after_passing", "chance", r"after_passing='chance' must be a number"),
])
def test_bad_stopping_options_are_refused_before_training(tmp_path, cache_dir, field, value,
                                                          message):
  config = tiny(load_config("listops_scratch"), cache_dir)
  section, _, key = ("finetune." + field).rpartition(".")
  node = config
  for part in section.split("."):
    node = node[part]
  with node.ignore_type():
    node[key] = value
  with pytest.raises(ValueError, match=message):
    experiment.run(config, str(tmp_path))
  assert not os.path.exists(tmp_path / "finetune" / "checkpoints")


def test_plateau_rule_counts_validations_without_improvement():
  rule = stopping.Plateau("accuracy", patience=2, min_delta=0.01)
  assert [rule.observe(s, {"accuracy": a}) for s, a in
          ((1, 0.5), (2, 0.505), (3, 0.52), (4, 0.525), (5, 0.529))] == [False] * 4 + [True]
  assert (rule.best, rule.best_step) == (0.52, 3) and "0.52 (step 3)" in rule.stopped
  restored = stopping.Plateau("accuracy", 2, 0.01)
  restored.restore(json.loads(json.dumps(rule.to_meta())))
  assert restored == rule
  with pytest.raises(ValueError, match="watched 'accuracy'"):
    stopping.Plateau("loss", 2, 0.0).restore(rule.to_meta())
  assert stopping.improves(0.9, 1.0, higher=False) and not stopping.improves(0.9, 1.0, True)


@pytest.mark.parametrize("metric, chance, escaped", [("accuracy", 0.5, 0.6), ("loss", 0.69, 0.5)])
def test_plateau_rule_waits_until_the_metric_has_passed_a_level(metric, chance, escaped):
  rule = stopping.Plateau(metric, patience=2, min_delta=0.0, after_passing=0.55 if metric ==
                          "accuracy" else 0.6)
  at_chance = [rule.observe(s, {metric: chance}) for s in range(1, 9)]
  assert not any(at_chance) and not rule.armed and rule.stale == 0
  assert [rule.observe(s, {metric: escaped}) for s in (9, 10, 11)] == [False, False, True]
  assert rule.armed and rule.best_step == 9 and "after passing" in rule.stopped
  assert stopping.Plateau(metric, 2, 0.0).armed  # no level: counts from the first validation


def test_training_flops_match_a_hand_count():
  d, heads, ff, vocab, length, batch, classes = 8, 2, 16, 10, 6, 2, 3
  cfg = transformer.ModelConfig(num_layers=1, d_model=d, num_heads=heads, d_ff=ff,
                                vocab_size=vocab, max_length=length, num_classes=classes,
                                attention="dense")
  per_position = 2 * (4 * d * d + 2 * d * ff)  # q, k, v, out; MLP in and out
  attention = 4 * length * d                   # q·kᵀ and p·v, per position and layer
  for head, head_flops in (("classifier", 2 * d * classes * batch),
                           ("mlm", 2 * d * vocab * batch * length)):
    model = transformer.SequenceModel(cfg, head=head)
    params = jax.eval_shape(lambda r: model.init(r, jnp.zeros((1, length), jnp.int32))["params"],
                            jax.random.PRNGKey(0))
    hand = batch * length * (per_position + attention) + head_flops
    assert flops.forward_flops(params, cfg, (batch, length)) == hand, head
    assert flops.train_step_flops(params, cfg, (batch, length)) == 3 * hand
  # Pairs: both documents through the encoder, the classifier once per pair on 4·d features.
  pair_cfg = cfg.replace(num_classes=classes)
  pair_model = transformer.SequenceModel(pair_cfg, head="classifier")
  params = jax.eval_shape(lambda r: pair_model.init(r, jnp.zeros((1, 2, length), jnp.int32))[
      "params"], jax.random.PRNGKey(0))
  assert flops.forward_flops(params, pair_cfg, (batch, 2, length)) == (
      2 * batch * length * (per_position + attention) + 2 * 4 * d * classes * batch)
  # Block-local attention: each query sees three blocks of keys.
  local = cfg.replace(max_length=64, attention="local", attention_block_size=8)
  assert flops.keys_per_query(local) == 24 and flops.keys_per_query(cfg) == length


def test_compute_matched_scratch_trains_for_the_flops_of_the_run_it_matches(tmp_path, cache_dir,
                                                                          spt_run):
  spt, _, done = spt_run  # the tiny SPT run, 6 steps a phase; only read here
  spent = sum(done[p]["train_flops"] for p in ("pretrain", "finetune"))
  matched = tiny(load_config("listops_scratch"), cache_dir, 6)
  matched.finetune.match_compute_of = spt
  result = experiment.run(matched, str(tmp_path / "matched"))["finetune"]
  assert result["steps"] == result["stopped_at_step"] == math.ceil(
      spent / result["train_flops_per_step"])
  # The scratch step costs less than SPT's pretraining step (no masked-token head over every
  # position), so it gets more than the 12 steps SPT took.
  assert result["steps"] > 12
  matched.finetune.match_compute_of = str(tmp_path / "nothing_here")
  with pytest.raises(ValueError, match="results.json does not exist; the run to match must have "
                                       "finished"):
    experiment.run(matched, str(tmp_path / "matched_nothing"))


def test_plateau_replay_script_finds_the_runs_a_rule_would_have_lost(tmp_path):
  script = load_script("plateau_replay")
  escapes_late = [0.5] * 8 + [0.6, 0.7, 0.72, 0.72, 0.72, 0.72]
  for arm, curve in (("late", escapes_late), ("chance", [0.5] * 14)):
    phase = tmp_path / arm / "seed_0" / "finetune"
    phase.mkdir(parents=True)
    records = [{"split": "train", "step": 1, "loss": 1.0}] + [
        {"split": "val", "step": 100 * (i + 1), "accuracy": a} for i, a in enumerate(curve)]
    (phase / "metrics.jsonl").write_text("\n".join(map(json.dumps, records)) + "\n")
  table = {arm: row for arm, *row in script.rows(str(tmp_path), "finetune", "accuracy", 3, 0.0,
                                                 0.55)}
  _, last, best, plain, passing = table["late"]
  assert (last, best) == (1400, 0.72)
  assert (plain.stop, plain.stopped, plain.best) == (400, True, 0.5)  # stopped at chance
  assert (passing.stop, passing.stopped, passing.best) == (1400, True, 0.72)
  _, _, _, plain, passing = table["chance"]
  assert (plain.stop, passing.stop, passing.stopped) == (400, 1400, False)
  text = script.markdown([(arm, *row) for arm, row in table.items()], "accuracy", 0.0, 0.55,
                         differences=True)
  assert "| late | 0 | 1,400 | 0.7200 | 400 | 0.5000 | 1,400 | 0.7200 |" in text
  assert "| chance | 0 | 1,400 | 0.5000 | 400 | 0.5000 | ≥ 1,400 | 0.5000 |" in text
  assert text.endswith("2 runs; the rule loses 1 (its best falls short of the run's by more than "
                       "0), with after_passing=0.55 0.")
