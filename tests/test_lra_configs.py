"""Every LRA task's `smoke` config, SPT and from scratch, end to end (Text and Image on TFDS mock data)."""
import contextlib
import os
import time

import pytest
import tensorflow_datasets as tfds

from conftest import load_config
from spt_jax import config_lib, experiment, train
from spt_jax.data import tasks

TASKS = ("text", "retrieval", "image", "pathfinder", "pathx")


def _data_context(task):
  if task in ("text", "image"):
    # No network here: TFDS's mock patches the data source with generated examples of the real
    # feature spec, so the loaders' own code runs unchanged.
    return tfds.testing.mock_data(num_examples=40, policy=tfds.testing.MockPolicy.USE_CODE)
  return contextlib.nullcontext()


FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def _cache(config, cache_dir):
  for section in ("data", "pretrain_data"):
    if section in config and "cache_dir" in config[section]:
      config[section].cache_dir = cache_dir
  if config.data.task == "retrieval":  # the AAN release cannot be downloaded: the bundled fixture
    config.data.data_dir = os.path.join(FIXTURES, "lra_release")


@pytest.mark.parametrize("task", TASKS)
def test_scratch_smoke_config_builds_its_phase(task, cache_dir):
  """The from-scratch configs train the same fine-tuning phase as the SPT ones (run end to end
  below): here, each validates and traces its model on its own data (nothing trained)."""
  config = load_config(f"{task}_scratch", "smoke")
  _cache(config, cache_dir)
  assert config.phases == "finetune" and config.finetune.objective == "classification"
  config_lib.validate(config, 1)
  with _data_context(task):
    params = train.abstract_params(config, "finetune", tasks.load(config.data))
  assert "classifier" in params and "encoder" in params


@pytest.mark.parametrize("kind", ["spt"])
@pytest.mark.parametrize("task", TASKS)
def test_smoke_config_runs(task, kind, tmp_path, cache_dir):
  config = load_config(f"{task}_{kind}", "smoke")
  _cache(config, cache_dir)
  start, start_cpu = time.time(), time.process_time()
  with _data_context(task):
    results = experiment.run(config, str(tmp_path))
  elapsed, cpu = time.time() - start, time.process_time() - start_cpu
  # A smoke run must finish within a minute on 2 CPU cores. Wall time says so on an idle machine;
  # on a loaded one (a sweep beside the suite) the run also waits for other processes, and its own
  # CPU time, all the work an idle machine would have to do, is what still measures the config.
  assert min(elapsed, cpu) < 60, (f"{task}_{kind}.py:smoke took {elapsed:.0f} s, {cpu:.0f} s of "
                                  f"CPU (limit 60 s)")
  assert set(results) == set(config.phases.split(","))
  assert 0 <= results["finetune"]["test_of_best"]["accuracy"] <= 1
  assert all(r["steps"] > 0 and r["steps_per_sec"] for r in results.values())


def test_pathfinder_to_cifar_cross_task(tmp_path, cache_dir):
  config = load_config("image_spt", "smoke,from_pathfinder")
  _cache(config, cache_dir)
  with _data_context("image"):
    results = experiment.run(config, str(tmp_path))
  assert results["pretrain"]["data_source"] != results["finetune"]["data_source"]
  assert "pathfinder" in results["pretrain"]["data_source"]


def test_incompatible_cross_task_pairing_is_refused(tmp_path):
  config = load_config("text_spt", "smoke")
  config.pretrain_data = config_lib.data_config("pathfinder", 32)
  config.pretrain.data = "pretrain_data"
  with pytest.raises(ValueError, match=r"Phase 'finetune' cannot start from phase 'pretrain': "
                                       r"pathfinder data .* input kinds differ \(pixels vs tokens\)"):
    experiment.run(config, str(tmp_path))
  config.pretrain_data.representation = "tokens"  # same kind, but 256 pixel tokens vs bytes: equal
  config.model.position = "learned"
  with pytest.raises(ValueError, match="learned position tables differ in length"):
    experiment.run(config, str(tmp_path))


def test_unknown_variant_is_refused():
  with pytest.raises(ValueError, match=r"Unknown variant\(s\) \['from_pathfinder'\]"):
    load_config("text_spt", "smoke,from_pathfinder")
