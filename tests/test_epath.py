"""A workdir given as a URL (gs://) is written there, through etils.epath, and nowhere locally;
and a single-process run stopped by SIGTERM saves there and resumes bit-identically.

There is no Cloud Storage here, so gs://bkt/ is an in-memory-like bucket: etils' own mock
(`epath.testing.mock_epath`) sends every epath call on a gs:// path to a local directory that stands
for the bucket, and Orbax's TensorStore array writes, which bypass epath, are pointed at the same
directory (its kvstore spec for a gs:// path, and its bucket-kind query, are the only Orbax calls
replaced). Everything the project does with the workdir, and everything Orbax does with its
checkpoint directories, goes through gs:// paths.

The run is sent SIGTERM during pretraining (by itself, at step 4, with main.py's handler installed)
and run again: one run covers both, a stop and a resume on a URL workdir.
"""
from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
from unittest import mock


import numpy as np
import pytest
from etils.epath import testing as epath_testing

from conftest import load_config, tiny
from spt_jax import checkpoints, distributed, experiment, metric_writers, tree
from spt_jax.data import base as data_base
from spt_jax.data import pipeline

BUCKET = "gs://bkt"
WORKDIR = f"{BUCKET}/runs/spt"
PHASES = ("pretrain", "finetune")


def outline(top: str) -> set[str]:
  """The files under `top`, relative to it, a checkpoint item's content as the item alone: Orbax
  names its array files by hash, and on an object store marks each step and item complete with a
  commit_success.txt instead of renaming a temporary directory."""
  out = set()
  for d, _, files in os.walk(top):
    for f in files:
      parts = os.path.relpath(os.path.join(d, f), top).split(os.sep)
      if f == "commit_success.txt":
        continue
      if "checkpoints" in parts and len(parts) > parts.index("checkpoints") + 4:
        parts = parts[:parts.index("checkpoints") + 4]
      out.add("/".join(parts))
  return out


class FakeBucket:
  """gs://bkt/... ↔ files under `root`; records every os.path.abspath of a URL and its caller."""

  def __init__(self, root: str):
    self.root = root
    self.abspath_calls: list[tuple[str, str]] = []  # (argument, calling file)

  def local(self, path) -> str:
    path = os.fspath(path)
    if path == BUCKET or path.startswith(BUCKET + "/"):
      return self.root + path[len(BUCKET):]
    return path

  def url(self, path) -> str:
    path = os.fspath(path)
    if path == self.root or path.startswith(self.root + os.sep):
      return BUCKET + path[len(self.root):]
    return path

  def files(self) -> set[str]:
    """Every file in the bucket, relative to the workdir (`outline`d)."""
    return outline(self.local(WORKDIR))

  def mocks(self) -> dict:
    def through(name):
      def call(original, path, *args, **kwargs):
        if name in ("rename", "replace", "copy"):
          return original(self.local(path), self.local(args[0]), *args[1:], **kwargs)
        return original(self.local(path), *args, **kwargs)
      return call

    def glob(original, pattern):
      return [self.url(p) for p in original(self.local(pattern))]

    def walk(original, top, **kwargs):
      for d, dirs, files in original(self.local(top), **kwargs):
        yield self.url(d), dirs, files

    names = ("copy", "exists", "isdir", "listdir", "makedirs", "mkdir", "open", "remove", "rename",
             "replace", "rmtree", "stat")
    return {**{n: through(n) for n in names}, "glob": glob, "walk": walk}


def _sigterm_at(step: int):
  """pipeline.train_batches whose first stream sends this process SIGTERM as it hands out the
  batch of `step`."""
  original, calls = pipeline.train_batches, []

  def batches(arrays, global_batch, *, seed, start_step=0, **kwargs):
    calls.append(None)
    first = len(calls) == 1
    for s, batch in enumerate(original(arrays, global_batch, seed=seed, start_step=start_step,
                                       **kwargs), start=start_step + 1):
      if first and s == step:
        os.kill(os.getpid(), signal.SIGTERM)
      yield batch
  return batches


@pytest.fixture(scope="module")
def gs_run(tmp_path_factory, cache_dir):
  """The tiny SPT run of `spt_run` with workdir gs://bkt/runs/spt, started from an empty local
  directory, stopped by SIGTERM at pretraining step 4 and run again: (FakeBucket, results, the
  local directory, log records, what the stop left: {"stopped", "latest", "finished"})."""
  from orbax.checkpoint._src.path import gcs_utils
  from tensorboardX import record_writer
  base = tmp_path_factory.mktemp("gs_run")
  bucket = FakeBucket(str(base / "bucket"))
  os.makedirs(bucket.root)
  cwd = base / "cwd"
  cwd.mkdir()

  def kvstore(path):
    _, inside = gcs_utils.parse_gcs_path(path, add_trailing_slash=False)
    return {"driver": "file", "path": os.path.join(bucket.root, inside)}

  real_abspath = os.path.abspath

  def abspath(path):
    text = os.fspath(path)
    if isinstance(text, str) and metric_writers.is_url(text):
      bucket.abspath_calls.append((text, sys._getframe(1).f_code.co_filename))
    return real_abspath(path)

  records = []
  handler = logging.Handler(logging.WARNING)
  handler.emit = records.append
  config = tiny(load_config("listops_spt"), cache_dir)
  previous, previous_sigterm = os.getcwd(), signal.getsignal(signal.SIGTERM)
  os.chdir(cwd)
  logging.getLogger().addHandler(handler)
  try:
    with epath_testing.mock_epath(**bucket.mocks()), \
         mock.patch.object(gcs_utils, "get_kvstore_for_gcs", kvstore), \
         mock.patch.object(gcs_utils, "is_hierarchical_namespace_enabled", lambda path: False), \
         mock.patch.object(record_writer, "GCS_ENABLED", False), \
         mock.patch.object(os.path, "abspath", abspath):
      assert distributed.handle_sigterm()  # as main.py's distributed.maybe_initialize() does
      with mock.patch.object(pipeline, "train_batches", _sigterm_at(4)), \
           pytest.raises(distributed.Stopped) as stopped:
        experiment.run(config, WORKDIR)
      ckpts = checkpoints.PhaseCheckpoints(f"{WORKDIR}/pretrain/checkpoints")
      stop = {"stopped": stopped.value, "latest": ckpts.latest_steps(),
              "finished": os.path.exists(bucket.local(f"{WORKDIR}/pretrain/results.json"))}
      ckpts.close()
      results = experiment.run(config, WORKDIR)
  finally:
    signal.signal(signal.SIGTERM, previous_sigterm)
    logging.getLogger().removeHandler(handler)
    os.chdir(previous)
  return bucket, results, cwd, records, stop


def test_sigterm_saves_the_latest_checkpoint_and_exits_0(gs_run):
  stop = gs_run[4]
  assert stop["stopped"].code == 0 and (stop["stopped"].phase, stop["stopped"].step) == ("pretrain",
                                                                                        4)
  assert stop["latest"] == [3, 4] and not stop["finished"]
  assert any("stopped on request at step 4/6" in r.getMessage() for r in gs_run[3])


def test_a_url_workdir_gets_every_file_and_the_local_disk_none(gs_run, spt_run):
  bucket, results, cwd, records, _ = gs_run
  local = spt_run[0]
  # The same files as the local run's, TensorBoard's events and the lock file excepted: tensorboardX reaches gs://
  # only with google-cloud-storage, and the run says so once instead of failing. Which two latest steps
  # are kept differs (the stop saved step 4).
  steps = lambda paths: {re.sub(r"checkpoints/latest/\d+/", "checkpoints/latest/<step>/", p)
                         for p in paths}
  # A local workdir also has its lock file (spt_jax/workdir_lock.py); a URL one is not locked.
  assert steps(bucket.files()) == steps(p for p in outline(local) if "/tensorboard/" not in p
                                        and not os.path.basename(p).startswith(".lock.process"))
  assert [p for p in os.listdir(cwd)] == [], "the run wrote into its working directory"
  assert not [p for p in os.listdir(bucket.root) if p != "runs"]
  tensorboard = [r.getMessage() for r in records if "TensorBoard" in r.getMessage()]
  assert len(tensorboard) == 1 and WORKDIR in tensorboard[0], tensorboard
  # A URL workdir computes exactly what a local one does, stopped and resumed or not.
  assert {p: (r["best_val"], r["test_of_best"]) for p, r in results.items()} == {
      p: (r["best_val"], r["test_of_best"]) for p, r in spt_run[2].items()}
  for phase in PHASES:
    np.testing.assert_equal(results[phase]["final_val"], spt_run[2][phase]["final_val"])
    assert results[phase]["selected_checkpoint"].startswith(f"{WORKDIR}/{phase}/checkpoints/best/")
    with open(bucket.local(f"{WORKDIR}/{phase}/metrics.jsonl")) as f, \
         open(os.path.join(local, phase, "metrics.jsonl")) as g:
      got, want = ([r for r in map(json.loads, h) if r["split"] != "train"] for h in (f, g))
    assert got == want, phase


def test_url_checkpoints_restore_through_orbax(gs_run, spt_run):
  bucket = gs_run[0]
  with epath_testing.mock_epath(**bucket.mocks()):
    from orbax.checkpoint._src.path import gcs_utils

    def kvstore(path):
      _, inside = gcs_utils.parse_gcs_path(path, add_trailing_slash=False)
      return {"driver": "file", "path": os.path.join(bucket.root, inside)}
    with mock.patch.object(gcs_utils, "get_kvstore_for_gcs", kvstore):
      for phase in PHASES:
        item = checkpoints.resolve_params_dir(f"{WORKDIR}/{phase}", checkpoints.LATEST)
        assert item.startswith(f"{WORKDIR}/{phase}/checkpoints/latest/")
        got = tree.flatten(checkpoints.restore_item(item))
        want = tree.flatten(checkpoints.restore_item(checkpoints.resolve_params_dir(
            os.path.join(spt_run[0], phase), checkpoints.LATEST)))
        assert got.keys() == want.keys()
        for path in got:
          np.testing.assert_array_equal(got[path], want[path], err_msg=f"{phase}/{path}")


def test_no_module_of_the_run_makes_a_url_absolute(gs_run):
  assert gs_run[0].abspath_calls == []


def test_init_from_records_the_url_it_loaded(gs_run):
  with open(gs_run[0].local(f"{WORKDIR}/finetune/init_from.json")) as f:
    assert json.load(f)["source"].startswith(f"{WORKDIR}/pretrain/checkpoints/best/")
  assert gs_run[0].abspath_calls == []


def test_url_paths_are_kept_as_urls():
  assert metric_writers.is_url("gs://b/x") and metric_writers.is_url("s3://b")
  assert not metric_writers.is_url("/tmp/gs://x") and not metric_writers.is_url("runs/x")
  assert os.fspath(metric_writers.workdir_path("gs://b/x/")) == "gs://b/x"
  assert os.fspath(metric_writers.workdir_path("runs/x")) == os.path.join(os.getcwd(), "runs/x")
  assert checkpoints._join("gs://b/w", "best", 3, "params") == "gs://b/w/best/3/params"


@pytest.mark.parametrize("key", ["data_dir", "cache_dir"])
def test_a_data_url_is_refused_before_any_work(tmp_path, key):
  config = tiny(load_config("listops_spt"), str(tmp_path / "cache"))
  config.data[key] = "gs://bkt/lra_release"
  workdir = tmp_path / "w"
  with pytest.raises(ValueError, match=rf"^config\.data\.{key}='gs://bkt/lra_release': data is "
                                       r"read from local directories only"):
    experiment.run(config, str(workdir))
  assert not workdir.exists() and not (tmp_path / "cache").exists()
  with pytest.raises(ValueError, match=rf"config\.data\.{key}="):
    data_base.data_root(config.data, None)


def test_an_unreachable_url_workdir_is_one_error(tmp_path):
  with pytest.raises(ValueError, match=r"--workdir=ftp://host/w cannot be reached"):
    experiment.prepare_workdir("ftp://host/w")


def test_load_run_reads_a_url_workdir(gs_run):
  from spt_jax.runs import load_run
  bucket, results = gs_run[0], gs_run[1]
  with epath_testing.mock_epath(**bucket.mocks()):
    from orbax.checkpoint._src.path import gcs_utils

    def kvstore(path):
      _, inside = gcs_utils.parse_gcs_path(path, add_trailing_slash=False)
      return {"driver": "file", "path": os.path.join(bucket.root, inside)}
    with mock.patch.object(gcs_utils, "get_kvstore_for_gcs", kvstore):
      run = load_run(WORKDIR, "finetune")
      assert run.checkpoint_dir.startswith(f"{WORKDIR}/finetune/checkpoints/best/")
      assert run.evaluate("test") == results["finetune"]["test_of_best"]
  assert bucket.abspath_calls == []


def _on_the_bucket(bucket):
  """The patches that put gs://bkt on `bucket` for epath, Orbax and tensorboardX (as gs_run)."""
  import contextlib
  from orbax.checkpoint._src.path import gcs_utils
  from tensorboardX import record_writer

  def kvstore(path):
    _, inside = gcs_utils.parse_gcs_path(path, add_trailing_slash=False)
    return {"driver": "file", "path": os.path.join(bucket.root, inside)}
  stack = contextlib.ExitStack()
  stack.enter_context(epath_testing.mock_epath(**bucket.mocks()))
  stack.enter_context(mock.patch.object(gcs_utils, "get_kvstore_for_gcs", kvstore))
  stack.enter_context(mock.patch.object(gcs_utils, "is_hierarchical_namespace_enabled",
                                        lambda path: False))
  stack.enter_context(mock.patch.object(record_writer, "GCS_ENABLED", False))
  return stack


def test_a_sweep_and_surgery_on_a_bucket(tmp_path, cache_dir):
  from spt_jax import config_lib, surgery, sweep
  bucket = FakeBucket(str(tmp_path / "bucket"))
  os.makedirs(bucket.root)
  # The local sweep tests' runs (test_sweep.py): their programs, compiled once for all three.
  from test_sweep import TINY
  grid = config_lib.sweep_config(
      base="configs/synthetic_spt.py:smoke", seeds=(0,), title="on a bucket",
      runs=[f"spt: {TINY}", f"from_spt: {TINY} phases=finetune "
            "finetune.init_from.source={workdir}/spt/seed_{seed}/pretrain"])
  root = f"{BUCKET}/sweep"
  with _on_the_bucket(bucket):
    rows = sweep.run_sweep(grid, root)
    assert [r["run"] for r in rows] == ["spt", "from_spt"]
    loaded = json.loads((metric_writers.workdir_path(root) / "from_spt/seed_0/finetune/"
                         "init_from.json").read_text())
    assert loaded["source"].startswith(f"{root}/spt/seed_0/pretrain")
    assert sweep.run_sweep(grid, root) == rows  # finished runs are skipped
    # Surgery round trip: load a phase's best parameters from the bucket, save an edit there.
    params = surgery.load(f"{root}/spt/seed_0/pretrain")
    saved = surgery.save(surgery.rescale(params, ["qk"], 0.5), f"{root}/edited")
    assert saved == f"{root}/edited/params"
    again = tree.flatten(surgery.load(f"{root}/edited"))
    for path, value in tree.flatten(params).items():
      factor = 0.5 if "/attention/query/" in path or "/attention/key/" in path else 1.0
      np.testing.assert_allclose(again[path], value * factor, rtol=1e-6, err_msg=path)
  for name in ("table.md", "table.csv", "results.json", "plot.png"):
    assert os.path.getsize(bucket.local(f"{root}/{name}")) > 0
  assert os.path.exists(bucket.local(f"{root}/spt/seed_0/run_spec.json"))
