"""Checkpoint surgery: edits reach init_from exactly, the CLI reads runs, and errors are clear."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, load_config, tiny
from spt_jax import checkpoints, experiment, surgery, tree

QK = r"encoder/layer_\d+/attention/(query|key)/kernel"


def _cli(*args) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "spt_jax.surgery", *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=120)


def _toy():
  return {"encoder": {"w": np.arange(6, dtype=np.float32).reshape(2, 3),
                      "b": np.ones(3, np.float16)},
          "head": {"kernel": np.full((3, 2), 2.0, np.float32)}}


def test_edits_round_trip_exactly_through_init_from(spt_run, cache_dir, tmp_path):
  workdir, _, _ = spt_run
  pretrained = surgery.load(os.path.join(workdir, "pretrain"))
  finetuned = surgery.load(os.path.join(workdir, "finetune"), "best")
  assert isinstance(pretrained["encoder"]["layer_0"]["attention"]["query"]["kernel"], np.ndarray)

  edited = surgery.transplant(finetuned, pretrained, [QK])
  edited = surgery.rescale(edited, [r"encoder/layer_0/mlp/.*kernel"], 0.5)
  edited = surgery.reinit(edited, [r"classifier/.*"], std=0.0)
  saved = surgery.save(edited, str(tmp_path / "edited"))
  assert saved == str(tmp_path / "edited" / "params")
  assert checkpoints.resolve_params_dir(str(tmp_path / "edited")) == saved

  flat, ft, pt = tree.flatten(edited), tree.flatten(finetuned), tree.flatten(pretrained)
  assert np.array_equal(flat["encoder/layer_0/attention/query/kernel"],
                        pt["encoder/layer_0/attention/query/kernel"])
  assert np.array_equal(flat["encoder/layer_0/mlp/dense_in/kernel"],
                        ft["encoder/layer_0/mlp/dense_in/kernel"] * np.float32(0.5))
  assert not flat["classifier/kernel"].any() and not flat["classifier/bias"].any()
  assert np.array_equal(flat["encoder/layer_0/attention/value/kernel"],
                        ft["encoder/layer_0/attention/value/kernel"])

  config = tiny(load_config("listops_spt"), cache_dir)
  config.phases = "finetune"
  config.finetune.num_steps = 2
  config.finetune.init_from.update(source=str(tmp_path / "edited"), checkpoint="best",
                                   include=(".*",), exclude=())
  new_workdir = str(tmp_path / "run")
  experiment.run(config, new_workdir)
  start = tree.flatten(checkpoints.restore_item(
      os.path.join(new_workdir, "finetune/checkpoints/init/0/params")))
  assert start.keys() == flat.keys()
  for path, value in flat.items():
    assert np.array_equal(np.asarray(start[path]), value), path


def test_cli_ls_and_diff_read_pipeline_checkpoints(spt_run):
  workdir, _, _ = spt_run
  pretrain, finetune = os.path.join(workdir, "pretrain"), os.path.join(workdir, "finetune")
  shape = surgery.load(pretrain)["encoder"]["layer_0"]["attention"]["query"]["kernel"].shape

  listing = _cli("ls", pretrain)
  assert listing.returncode == 0, listing.stderr
  (row,) = [l for l in listing.stdout.splitlines()
            if l.startswith("encoder/layer_0/attention/query/kernel ")]
  assert str(shape) in row and "float32" in row
  assert listing.stdout.splitlines()[-1].startswith("total: ")

  only_q = _cli("ls", pretrain, "--checkpoint", "init", "--pattern", r".*/query/kernel")
  assert only_q.returncode == 0, only_q.stderr
  assert "query/kernel" in only_q.stdout and "key/kernel" not in only_q.stdout

  compared = _cli("diff", pretrain, finetune, "--checkpoint", "best")
  assert compared.returncode == 0, compared.stderr
  status = {l.split()[0]: l.split()[1] for l in compared.stdout.splitlines()[2:-1]}
  assert status["mlm_head/kernel"] == "only_in_a"
  assert status["classifier/kernel"] == "only_in_b"
  assert any(p.startswith("encoder/") and s == "changed" for p, s in status.items())
  assert " changed, " in compared.stdout.splitlines()[-1]


def test_diff_rows_measure_relative_change():
  a = _toy()
  b = surgery.rescale(a, ["encoder/w"], 3.0)
  b["extra"] = np.zeros(1, np.float32)
  b["head"]["kernel"] = np.zeros((2, 2), np.float32)
  rows = {r["path"]: r for r in surgery.diff(a, b)}
  assert rows["encoder/w"]["status"] == "changed"
  assert rows["encoder/w"]["rel_change"] == pytest.approx(2.0)
  assert rows["encoder/w"]["max_abs"] == pytest.approx(10.0)
  assert rows["encoder/b"] == {"path": "encoder/b", "status": "same", "rel_change": 0.0,
                               "max_abs": 0.0}
  assert rows["head/kernel"]["status"] == "shape_mismatch"
  assert rows["extra"]["status"] == "only_in_b"
  zero = {"x": np.zeros(2, np.float32)}
  assert surgery.diff(zero, {"x": np.ones(2, np.float32)})[0]["rel_change"] == np.inf
  text = surgery.format_diff(list(rows.values()))
  assert "1 changed, 1 same, 0 only in A, 1 only in B, 1 shape mismatch" in text


def test_ls_rows_and_table():
  rows = {r["path"]: r for r in surgery.ls(_toy())}
  assert rows["encoder/w"] == {"path": "encoder/w", "shape": (2, 3), "dtype": "float32", "size": 6,
                               "norm": pytest.approx(np.sqrt(55.0))}
  assert surgery.format_table(list(rows.values())).splitlines()[-1] == (
      "total: 15 parameters in 3 arrays")


def test_reinit_is_deterministic_per_path_and_rescale_keeps_dtype():
  params = _toy()
  both = tree.flatten(surgery.reinit(params, ["encoder/.*"], std=0.1, seed=3))
  one = tree.flatten(surgery.reinit(params, ["encoder/w"], std=0.1, seed=3))
  assert np.array_equal(both["encoder/w"], one["encoder/w"])
  assert both["encoder/b"].dtype == np.float16 and both["encoder/w"].dtype == np.float32
  assert np.array_equal(one["encoder/b"], params["encoder"]["b"])
  other_seed = tree.flatten(surgery.reinit(params, ["encoder/w"], std=0.1, seed=4))
  assert not np.array_equal(other_seed["encoder/w"], one["encoder/w"])
  twins = surgery.reinit({"x": np.zeros(64, np.float32), "y": np.zeros(64, np.float32)}, [".*"],
                         std=0.1)
  assert not np.array_equal(twins["x"], twins["y"])
  assert 0.05 < np.std(twins["x"]) < 0.2

  scaled = surgery.rescale(params, ["encoder/.*"], 0.5)
  assert scaled["encoder"]["b"].dtype == np.float16
  assert np.array_equal(scaled["encoder"]["b"], np.full(3, 0.5, np.float16))
  assert np.array_equal(params["encoder"]["w"], np.arange(6, dtype=np.float32).reshape(2, 3))


def test_select_and_drop_partition_the_paths():
  params = _toy()
  kept = tree.flatten(surgery.select(params, ["encoder/.*"], exclude=["encoder/b"]))
  assert list(kept) == ["encoder/w"]
  selected = tree.flatten(surgery.select(params, ["head/.*"]))
  dropped = tree.flatten(surgery.drop(params, ["head/.*"]))
  assert selected.keys() | dropped.keys() == tree.flatten(params).keys()
  assert not selected.keys() & dropped.keys()


def test_errors_name_what_went_wrong(tmp_path):
  params = _toy()
  with pytest.raises(ValueError, match="'encoder/nope'.*matches no parameter path"):
    surgery.rescale(params, ["encoder/nope"], 2.0)
  with pytest.raises(ValueError, match="'decoder/.*'.*matches no parameter path"):
    surgery.drop(params, ["decoder/.*"])
  with pytest.raises(ValueError, match=r"head/kernel: target has \(3, 2\) float32, "
                                       r"source has \(4, 2\) float32"):
    surgery.transplant(params, {"head": {"kernel": np.zeros((4, 2), np.float32)}}, ["head/.*"])

  with pytest.raises(FileNotFoundError, match="does not exist"):
    surgery.load(str(tmp_path / "missing"))
  junk = tmp_path / "junk"
  junk.mkdir()
  (junk / "notes.txt").write_text("not a checkpoint")
  with pytest.raises(ValueError, match=f"{junk}.*not an Orbax"):
    surgery.load(str(junk))
  with pytest.raises(FileExistsError, match=f"{junk}.*not an empty directory"):
    surgery.save(params, str(junk))
  assert sorted(os.listdir(junk)) == ["notes.txt"]
  with pytest.raises(ValueError, match="std"):
    surgery.reinit(params, ["head/.*"], std=-1.0)


def test_cli_reports_a_missing_path_in_one_line(tmp_path):
  result = _cli("ls", str(tmp_path / "missing"))
  assert result.returncode != 0
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and "does not exist" in lines[0] and "Traceback" not in result.stderr
  junk = tmp_path / "junk"
  junk.mkdir()
  (junk / "a.bin").write_bytes(b"\x00\x01")
  result = _cli("diff", str(junk), str(junk))
  assert result.returncode != 0
  assert result.stderr.strip().splitlines() == [
      f"surgery diff: error: {junk} is not an Orbax parameter checkpoint: expected a phase directory "
      f"(with checkpoints/{{best,latest}}/<step>/params), a step directory with params/, or a params "
      f"item directory."]
