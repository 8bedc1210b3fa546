"""results.json's `environment`: what a phase's numbers depend on beyond its config."""
import subprocess

import jax

from conftest import ROOT, load_config, tiny
from spt_jax import experiment, platform, provenance


def test_environment_names_versions_code_processor_and_threads():
  env = provenance.environment()
  assert env["packages"]["jax"] == jax.__version__ and env["packages"]["flax"]
  assert env["backend"] == platform.backend_name() and env["devices"] == jax.device_count()
  assert env["processor"].strip()
  if env["backend"] == "cpu":
    assert env["cpu_threads"] == platform.cpu_threads()
  head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True)
  if head.returncode == 0:  # a checkout (CI's clone is one); an archive copy records None
    assert env["code"]["commit"] == head.stdout.strip()
    assert isinstance(env["code"]["modified"], bool)


def test_each_phase_records_it(tmp_path, cache_dir):
  done = experiment.run(tiny(load_config("listops_scratch"), cache_dir, 3), str(tmp_path))
  assert done["finetune"]["environment"] == provenance.environment()
