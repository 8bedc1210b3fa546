"""A data_dir the user named is only ever read: generation goes to cache_dir alone.

Every case hashes each file under the user's directory before and after, and compares the listing
(directories included), so a rewritten, removed or new file, even a temporary one, is caught.
"""
from __future__ import annotations

import hashlib
import os
import shutil

import pytest

from spt_jax import config_lib
from spt_jax.data import listops, pathfinder, tasks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
TINY_LISTOPS = dict(num_train=12, num_val=4, num_test=4, min_length=4, max_length=32, max_depth=4,
                    max_args=4, seed=1)
HARD = os.path.join("pathfinder32", "curv_contour_length_14")


def snapshot(directory) -> dict[str, str]:
  """{relative path: sha256 of the file, or '<dir>'} for everything under directory."""
  out = {}
  for parent, dirs, files in os.walk(directory):
    for name in dirs:
      out[os.path.relpath(os.path.join(parent, name), directory)] = "<dir>"
    for name in files:
      path = os.path.join(parent, name)
      with open(path, "rb") as f:
        out[os.path.relpath(path, directory)] = hashlib.sha256(f.read()).hexdigest()
  return out


def listops_config(tmp_path, data_dir: str):
  cfg = config_lib.data_config("listops", **TINY_LISTOPS)
  cfg.update(data_dir=data_dir, cache_dir=str(tmp_path / "cache"), max_length=32)
  return cfg


def pathfinder_config(tmp_path, data_dir: str, num_images: int = 20):
  cfg = config_lib.data_config("pathfinder", 32, data_dir=data_dir,
                               cache_dir=str(tmp_path / "cache"))
  cfg.generator.update(num_images=num_images, seed=3)
  return cfg


def refused_untouched(cfg, user_dir, *expected):
  """tasks.load(cfg) fails naming each of expected; user_dir and the cache are as before."""
  before = snapshot(user_dir)
  with pytest.raises(FileNotFoundError) as error:
    tasks.load(cfg)
  message = str(error.value)
  assert "\n" not in message
  for text in (*expected, "leave config.data.data_dir empty"):
    assert text in message
  assert snapshot(user_dir) == before
  assert not os.path.exists(cfg.cache_dir)  # Nothing generated anywhere instead.
  return message


def test_listops_data_dir_missing_a_split_is_refused_untouched(tmp_path):
  user = str(tmp_path / "lra_release")
  listops.write_official_layout(user, listops.GeneratorSpec(**TINY_LISTOPS), progress=False)
  os.remove(listops.split_path(user, "val"))
  message = refused_untouched(listops_config(tmp_path, user), user,
                              f"{user} lacks {os.path.join(listops.SUBDIR, 'basic_val.tsv')};")
  assert "expected " + ", ".join(listops.split_path(user, s) for s in listops.SPLITS) in message


def test_listops_data_dir_that_does_not_exist_stays_absent(tmp_path):
  user = str(tmp_path / "lra_relaese")
  refused_untouched(listops_config(tmp_path, user), tmp_path, f"{user} does not exist;",
                    listops.split_path(user, "train"), listops.split_path(user, "test"))
  assert not os.path.exists(user)


def test_listops_generates_into_cache_without_data_dir(tmp_path):
  cfg = listops_config(tmp_path, "")
  data = tasks.load(cfg)
  root = os.path.join(cfg.cache_dir, listops.GeneratorSpec(**TINY_LISTOPS).cache_name())
  assert data.source == root
  assert [len(data.splits[s]["labels"]) for s in listops.SPLITS] == [12, 4, 4]
  assert sorted(os.listdir(os.path.join(root, listops.SUBDIR))) == [
      "basic_test.tsv", "basic_train.tsv", "basic_val.tsv"]


@pytest.fixture
def pathfinder_user(tmp_path):
  """A copy of the committed Pathfinder fixture (one batch: metadata/0.npy, imgs/0/)."""
  user = tmp_path / "lra_release"
  shutil.copytree(os.path.join(FIXTURES, "pathfinder32"), user / "pathfinder32")
  return user


def _add_batches(user, count: int) -> None:
  """Copies batch 0 to batches 1..count-1, so that a gap can be made in a multi-batch release."""
  directory = user / HARD
  lines = (directory / "metadata" / "0.npy").read_text(encoding="utf-8")
  for k in range(1, count):
    shutil.copytree(directory / "imgs" / "0", directory / "imgs" / str(k))
    (directory / "metadata" / f"{k}.npy").write_text(lines.replace("imgs/0 ", f"imgs/{k} "),
                                                     encoding="utf-8")


def test_pathfinder_data_dir_without_metadata_is_refused_untouched(tmp_path, pathfinder_user):
  os.remove(pathfinder_user / HARD / "metadata" / "0.npy")
  refused_untouched(pathfinder_config(tmp_path, str(pathfinder_user)), pathfinder_user,
                    f"{pathfinder_user} has no {os.path.join(HARD, 'metadata', '<k>.npy')};",
                    os.path.join(str(pathfinder_user), HARD, "metadata", "<k>.npy"))


def test_pathfinder_data_dir_missing_one_metadata_file_is_refused_untouched(tmp_path,
                                                                             pathfinder_user):
  _add_batches(pathfinder_user, 3)
  os.remove(pathfinder_user / HARD / "metadata" / "1.npy")
  # A gap in <k>: the release is incomplete (a generator spec of >= 2000 images used to regenerate
  # batch 1 in place, replacing imgs/1/; a smaller one trained on what was left).
  refused_untouched(pathfinder_config(tmp_path, str(pathfinder_user)), pathfinder_user,
                    f"lacks {os.path.join(HARD, 'metadata', '1.npy')};")


def test_pathfinder_data_dir_missing_an_image_dir_is_refused_untouched(tmp_path, pathfinder_user):
  shutil.rmtree(pathfinder_user / HARD / "imgs" / "0")
  refused_untouched(pathfinder_config(tmp_path, str(pathfinder_user)), pathfinder_user,
                    f"lacks {os.path.join(HARD, 'imgs', '0')};")


def test_pathfinder_data_dir_that_does_not_exist_stays_absent(tmp_path):
  user = tmp_path / "lra_relaese"
  refused_untouched(pathfinder_config(tmp_path, str(user)), tmp_path, f"{user} does not exist;",
                    os.path.join(str(user), HARD, "metadata", "<k>.npy"))
  assert not user.exists()


def test_pathfinder_generates_into_cache_without_data_dir(tmp_path):
  cfg = pathfinder_config(tmp_path, "", num_images=10)
  data = tasks.load(cfg)
  spec = pathfinder.GeneratorSpec(num_images=10, seed=3)
  assert data.source == os.path.join(cfg.cache_dir, spec.cache_name())
  assert [len(data.splits[s]["labels"]) for s in pathfinder.SPLITS] == [8, 1, 1]
  assert os.listdir(os.path.join(data.source, HARD, "metadata")) == ["0.npy"]
