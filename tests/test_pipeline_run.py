"""End-to-end: the SPT → fine-tune pipeline, its hand-off, results and checkpoints."""
import json
import os
import subprocess
import sys

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp

from spt_jax import experiment, train, tree
from spt_jax.data import tasks


def _restore(path):
  return tree.flatten(ocp.StandardCheckpointer().restore(os.path.abspath(path)))


def _newest_step(directory):
  step = max((s for s in os.listdir(directory) if s.isdigit()), key=int)
  return os.path.join(directory, step)


def test_results_json_has_every_phase_and_figure(spt_run):
  workdir, config, results = spt_run
  on_disk = json.load(open(os.path.join(workdir, "results.json")))
  assert set(on_disk) == {"pretrain", "finetune"}
  for phase, r in on_disk.items():
    assert r["steps"] == config[phase].num_steps
    assert {"final_val", "best_val", "test_of_best", "wall_time_sec", "steps_per_sec"} <= set(r)
    assert 0 <= r["test_of_best"]["accuracy"] <= 1 and r["steps_per_sec"] > 0
    assert os.path.isfile(os.path.join(workdir, phase, "metrics.jsonl"))
    assert any(f.startswith("events") for f in os.listdir(os.path.join(workdir, phase, "tensorboard")))
  assert "mask_rate" in on_disk["pretrain"]["best_val"]


def test_finetune_starts_from_the_pretrained_encoder_bitwise(spt_run):
  workdir, _, _ = spt_run
  pretrained = _restore(os.path.join(_newest_step(os.path.join(workdir, "pretrain/checkpoints/best")),
                                     "params"))
  start = _restore(os.path.join(workdir, "finetune/checkpoints/init/0/params"))
  encoder = [p for p in start if p.startswith("encoder/")]
  assert encoder and all(np.array_equal(start[p], pretrained[p]) for p in encoder)
  assert "classifier/kernel" in start and "classifier/kernel" not in pretrained
  assert "mlm_head/kernel" not in start
  report = json.load(open(os.path.join(workdir, "finetune/init_from.json")))
  assert sorted(report["loaded"]) == sorted(encoder)
  assert report["fresh"] == ["classifier/bias", "classifier/kernel"]
  assert report["ignored"] == ["mlm_head/bias", "mlm_head/kernel"]
  # The fresh classifier is the from-scratch initialisation of the same seed, not pretrained values.
  scratch_init = _fresh_finetune_init(workdir)
  assert np.array_equal(start["classifier/kernel"], scratch_init["classifier/kernel"])
  assert not np.array_equal(start["encoder/token_embedding/embedding"],
                            scratch_init["encoder/token_embedding/embedding"])


def _fresh_finetune_init(workdir):
  config = ml_collections.ConfigDict(json.load(open(os.path.join(workdir, "finetune/config.json"))))
  task = tasks.load(config.data)
  objective = train.make_objective(config, "finetune", task)
  init_rng = jax.random.split(train.phase_rng(config.seed, "finetune"), 3)[0]
  return tree.flatten(objective.init_params(init_rng, np.zeros((1, task.max_length), np.int32)))


def test_checkpoint_reads_with_plain_orbax_without_spt_jax(spt_run):
  workdir, _, _ = spt_run
  params_dir = os.path.join(_newest_step(os.path.join(workdir, "finetune/checkpoints/best")), "params")
  # The README's recipe, verbatim apart from the path.
  code = ("import sys, jax, orbax.checkpoint as ocp\n"
          f"path = {params_dir!r}\n"
          "ckptr = ocp.StandardCheckpointer()\n"
          "meta = ckptr.metadata(path).item_metadata.tree\n"
          "cpu = jax.sharding.SingleDeviceSharding(jax.devices()[0])\n"
          "target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=cpu), meta)\n"
          "params = ckptr.restore(path, target)\n"
          "assert 'spt_jax' not in sys.modules\n"
          "print(sorted(params), params['classifier']['kernel'].shape)\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/",
                       timeout=120)
  assert out.returncode == 0, out.stderr[-2000:]
  assert "['classifier', 'encoder'] (16, 10)" in out.stdout


def test_a_finished_run_is_not_recomputed(spt_run):
  workdir, config, results = spt_run
  stamp = {p: os.path.getmtime(os.path.join(workdir, p, "results.json")) for p in results}
  again = experiment.run(config, workdir)
  assert again == results
  assert stamp == {p: os.path.getmtime(os.path.join(workdir, p, "results.json")) for p in results}
