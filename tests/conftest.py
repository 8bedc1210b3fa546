"""Tiny configs and shared runs: every test here must stay fast on 2 CPU cores."""
from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

# The suite's programs are tiny and compiled once or twice each, so XLA's compile time, not their run
# time, is most of the suite's: LLVM's expensive optimisation passes cost more than they save here
# (~15% of the suite's time). Set before JAX starts its backend, and inherited by every main.py a
# test runs. Every comparison a test makes is between programs compiled alike.
os.environ["XLA_FLAGS"] = " ".join(
    filter(None, [os.environ.get("XLA_FLAGS", ""), "--xla_llvm_disable_expensive_passes=true"]))

import jax  # noqa: E402
import pytest  # noqa: E402

from spt_jax import config_lib, experiment, platform  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TFDS_FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tfds")
TFDS_ARRAY_RECORD = os.path.join(TFDS_FIXTURES, "array_record")


# The tiny configs compile the same XLA programs again and again: in every test that runs one, and in
# every main.py a test starts, kills and restarts. One compilation cache for the session, handed to
# those subprocesses through the environment, compiles each once. A cache hit is the executable XLA
# compiled for the same program, so no value changes; nothing of it outlives the session. The
# pytest-xdist workers (pytest.ini) share their controller's cache, so a program one worker compiled
# is a hit in the other.
_CACHE_OPTIONS = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                  "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
_XLA_CACHE = pytest.StashKey[str]()


def pytest_configure(config):
  if hasattr(config, "workerinput"):  # a pytest-xdist worker: its controller's cache, shared
    cache = os.environ["JAX_COMPILATION_CACHE_DIR"]
  else:
    cache = tempfile.mkdtemp(prefix="spt_jax_test_xla_cache_")
    config.stash[_XLA_CACHE] = cache
  os.environ.update(_CACHE_OPTIONS, JAX_COMPILATION_CACHE_DIR=cache)
  jax.config.update("jax_compilation_cache_dir", cache)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


_WORKER_MEMORY = 3 << 30  # One process held 2.9 GB resident after 183 of these tests.


def pytest_xdist_auto_num_workers(config):
  """`-n auto` (pytest.ini): one worker per usable core, but no more than the available memory
  holds (a many-core box with little memory would otherwise swap) and no more than 8."""
  if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
    return None  # xdist's own hook honours it.
  workers = min(platform.usable_cores(), 8)
  try:
    with open("/proc/meminfo") as f:
      available = next(int(line.split()[1]) << 10 for line in f if line.startswith("MemAvailable:"))
    workers = min(workers, available // _WORKER_MEMORY)
  except (OSError, StopIteration):
    pass  # Not Linux: cores alone.
  return max(1, workers)


def pytest_unconfigure(config):
  shutil.rmtree(config.stash.get(_XLA_CACHE, ""), ignore_errors=True)


def load_module(name: str, path: str):
  """The Python file at `path` as a module named `name` (for files outside any package)."""
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@functools.cache
def tfds_fixtures():
  """tests/fixtures/tfds/make_fixtures.py, the one definition of the TFDS fixtures' examples."""
  return load_module("make_tfds_fixtures", os.path.join(TFDS_FIXTURES, "make_fixtures.py"))


def load_script(name: str):
  """scripts/<name>.py as a module."""
  return load_module(name, os.path.join(ROOT, "scripts", f"{name}.py"))


def load_config(name: str, arg=None):
  """configs/<name>.py's config (variant `arg`), through the one config loader."""
  return config_lib.load_config(os.path.join(ROOT, "configs", f"{name}.py") + (f":{arg}" if arg
                                                                                else ""))


def tiny(config, cache_dir: str, steps: int = 6):
  """A config of the same shape as the real ones, shrunk to compile and run in seconds."""
  config.data.cache_dir = cache_dir
  config.data.max_length = 32
  config.data.generator.update(num_train=64, num_val=20, num_test=20, min_length=4, max_length=32,
                               max_depth=4, max_args=4)
  config.model.update(num_layers=1, d_model=16, num_heads=2, d_ff=32)
  for name in config.phases.split(","):
    config[name].update(batch_size=8, num_steps=steps, warmup_steps=2, log_every_steps=2,
                        eval_every_steps=3, checkpoint_every_steps=3)
  return config


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("data_cache"))


@pytest.fixture
def tiny_spt(cache_dir):
  return tiny(load_config("listops_spt"), cache_dir)


@pytest.fixture(scope="session")
def spt_run(tmp_path_factory, cache_dir):
  """One finished tiny SPT run (pretrain + finetune), shared by the tests that only read it."""
  workdir = str(tmp_path_factory.mktemp("spt_run"))
  config = tiny(load_config("listops_spt"), cache_dir)
  results = experiment.run(config, workdir)
  return workdir, config, results


def run_main(args, env=None, timeout=240):
  """main.py in a fresh interpreter (for flags, device counts and kills), as one process unless
  `args` say otherwise (its default on several cores is several, tests/test_multiprocess.py)."""
  full_env = dict(os.environ, **(env or {}))
  if not any(a.startswith("--cpu_processes") for a in args):
    args = [*args, "--cpu_processes=1"]
  return subprocess.run([sys.executable, os.path.join(ROOT, "main.py"), *args], env=full_env,
                        capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def _flat(d, prefix=""):
  for k, v in d.items():
    if isinstance(v, dict):
      yield from _flat(v, f"{prefix}{k}.")
    else:
      yield f"{prefix}{k}", v


def as_flags(config, base) -> list[str]:
  """`--config.x=y` overrides that turn config file defaults `base` into `config`."""
  before = dict(_flat(base.to_dict()))
  return [f"--config.{k}={v}" for k, v in _flat(config.to_dict()) if before.get(k) != v]


def tiny_flags(cache_dir: str, steps: int = 6) -> list[str]:
  """The `tiny` SPT config as command-line overrides of configs/listops_spt.py."""
  return as_flags(tiny(load_config("listops_spt"), cache_dir, steps), load_config("listops_spt"))
