"""`python -m spt_jax.data.prepare`: an lra_release tree in the real nesting passes; each defect is
named by path with a non-zero exit (1: the loader would refuse, 2: it would skip or tolerate); the
printed data_dir trains; TFDS data is checked in both formats, or the build command explained."""
from __future__ import annotations

import os
import shlex
import shutil

import pytest

from conftest import load_config, tiny
from spt_jax import experiment
from spt_jax.analysis import report
from spt_jax.data import listops, prepare

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
TFDS = os.path.join(FIXTURES, "tfds")
# The committed Pathfinder fixture keeps an empty PNG, as the release has one.
EMPTY_PNG = "sample_5.png"


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
  """A directory where lra_release.gz was unpacked: lra_release/listops-1000/ (written by the
  generator in LRA's layout), lra_release/lra_release/tsv_data/ (the AAN fixture) and
  lra_release/pathfinder32/curv_contour_length_14/ (the Pathfinder fixture without its empty PNG)."""
  top = tmp_path_factory.mktemp("unpacked")
  root = top / "lra_release"
  listops.write_official_layout(str(root), listops.GeneratorSpec(
      num_train=64, num_val=20, num_test=20, min_length=4, max_length=32, max_depth=4, max_args=4,
      seed=0), progress=False)
  shutil.copytree(os.path.join(FIXTURES, "lra_release", "tsv_data"),
                  root / "lra_release" / "tsv_data")
  difficulty = root / "pathfinder32" / "curv_contour_length_14"
  shutil.copytree(os.path.join(FIXTURES, "pathfinder32", "curv_contour_length_14"), difficulty)
  (difficulty / "imgs" / "0" / EMPTY_PNG).unlink()
  meta = difficulty / "metadata" / "0.npy"
  meta.write_text("".join(line for line in meta.read_text().splitlines(keepends=True)
                          if f" {EMPTY_PNG} " not in line))
  return top


def run(capsys, *args) -> tuple[int, str]:
  code = prepare.main([*args])
  return code, capsys.readouterr().out


def flag_value(out: str) -> str:
  """The data_dir that the report's last line passes."""
  (flag,) = [f for f in shlex.split(out.splitlines()[-1]) if f.startswith("--config.data.data_dir=")]
  return flag.split("=", 1)[1]


@pytest.mark.parametrize("task, found", [("listops", "lra_release"),
                                         ("retrieval", "lra_release/lra_release"),
                                         ("pathfinder", "lra_release")])
def test_the_release_in_its_real_nesting_passes_from_any_level(unpacked, capsys, task, found):
  for data_dir in (unpacked, unpacked / "lra_release"):
    code, out = run(capsys, f"--task={task}", f"--data_dir={data_dir}")
    assert code == 0, out
    assert "OK: complete" in out and "ERROR" not in out and "DEFECT" not in out
    assert flag_value(out) == str(unpacked / found)


def _lines(path):
  return path.read_bytes().splitlines(keepends=True)


def _cut_mid_row(path):
  data = path.read_bytes()
  path.write_bytes(data[:data.rindex(b"\t", 0, len(data) - 1) - 5])  # Inside the last row's text1.


DEFECTS = {
    # name: (task, relative path, damage, exit code, text after the path)
    "missing file": ("listops", "lra_release/listops-1000/basic_val.tsv", lambda p: p.unlink(),
                     1, ": missing"),
    "wrong header": ("listops", "lra_release/listops-1000/basic_test.tsv",
                     lambda p: p.write_bytes(b"Source\tLabel\n" + b"".join(_lines(p)[1:])), 1,
                     ":1: bad header 'Source\\tLabel'"),
    "a header where none belongs": (
        "retrieval", "lra_release/lra_release/tsv_data/new_aan_pairs.eval.tsv",
        lambda p: p.write_bytes(b"label\tid1\tid2\ttext1\ttext2\n" + p.read_bytes()), 1,
        ":1: label b'label' is not a number. The AAN files have no header line"),
    "truncated TSV": ("retrieval", "lra_release/lra_release/tsv_data/new_aan_pairs.train.tsv",
                      _cut_mid_row, 1, ":4: expected 5 tab-separated fields"),
    "TSV cut in its last field": (
        "retrieval", "lra_release/lra_release/tsv_data/new_aan_pairs.test.tsv",
        lambda p: p.write_bytes(p.read_bytes()[:-20]), 2, ": the last line has no newline"),
    "empty PNG": ("pathfinder", "lra_release/pathfinder32/curv_contour_length_14/imgs/0/sample_3.png",
                  lambda p: p.write_bytes(b""), 2, " (metadata/0.npy:4: 0-byte file)"),
    "unreadable PNG": ("pathfinder",
                       "lra_release/pathfinder32/curv_contour_length_14/imgs/0/sample_7.png",
                       lambda p: p.write_bytes(p.read_bytes()[:30]), 2, " (metadata/0.npy:7: "),
    "metadata line pointing at a missing image": (
        "pathfinder", "lra_release/pathfinder32/curv_contour_length_14/imgs/0/sample_11.png",
        lambda p: p.unlink(), 2, " (metadata/0.npy:11: no such file)"),
}


@pytest.mark.parametrize("name", DEFECTS)
def test_each_defect_is_reported_by_path_with_a_nonzero_exit(unpacked, tmp_path, capsys, name):
  task, relative, damage, code, detail = DEFECTS[name]
  copy = tmp_path / "unpacked"
  shutil.copytree(unpacked, copy)
  damage(copy / relative)
  got, out = run(capsys, f"--task={task}", f"--data_dir={copy}")
  assert got == code, out
  level = "ERROR" if code == 1 else "DEFECT"
  (line,) = [line for line in out.splitlines() if str(copy / relative) in line
             and line.strip().startswith(level)]
  assert f"{copy / relative}{detail}" in line, line
  if code == 1:
    assert "REFUSED" in out and "--config.data.data_dir" not in out
  else:  # Usable: the loader skips or tolerates it, and the flag is still given.
    assert "USABLE with 1 defect(s)" in out and flag_value(out)


def test_a_split_left_without_images_is_refused(unpacked, tmp_path, capsys):
  copy = tmp_path / "unpacked"
  shutil.copytree(unpacked, copy)
  imgs = copy / "lra_release/pathfinder32/curv_contour_length_14/imgs/0"
  # 19 records: train 0-14, val 15-16, test 17-18 (metadata order); the val images made empty.
  lines = (imgs.parent.parent / "metadata" / "0.npy").read_text().splitlines()
  for line in lines[15:17]:
    (imgs / line.split()[1]).write_bytes(b"")
  code, out = run(capsys, "--task=pathfinder", f"--data_dir={copy}", "--images=stat")
  assert code == 1, out
  assert "the val split (records 15...16 of 19) has no readable image" in out
  assert "2 empty image(s)" in out


def test_the_printed_data_dir_trains_and_reports(unpacked, capsys, tmp_path):
  code, out = run(capsys, "--task=listops", f"--data_dir={unpacked}")
  assert code == 0, out
  config = tiny(load_config("listops_scratch"), str(tmp_path / "cache"), steps=3)
  config.data.data_dir = flag_value(out)
  results = experiment.run(config, str(tmp_path / "run"))
  assert results["finetune"]["data_source"] == str(unpacked / "lra_release")
  assert results["finetune"]["data_generated"] is False
  assert not os.path.exists(tmp_path / "cache")  # Read from the data_dir, nothing generated.
  for name in (report.FIGURE, report.SUMMARY):  # The phase's report, as after every run.
    assert os.path.getsize(tmp_path / "run" / "finetune" / name) > 0


def test_tfds_data_in_either_format_passes(capsys):
  for task in ("text", "image"):
    for fmt in ("tfrecord", "array_record"):
      code, out = run(capsys, f"--task={task}", f"--data_dir={os.path.join(TFDS, fmt)}")
      assert code == 0, out
      assert f"format {fmt}" in out and "every record read" in out
      assert flag_value(out) == os.path.join(TFDS, fmt)
  # The dataset's own directory (or one inside it) names the same data_dir.
  code, out = run(capsys, "--task=text",
                  f"--data_dir={os.path.join(TFDS, 'tfrecord', 'imdb_reviews', 'plain_text')}")
  assert code == 0 and flag_value(out) == os.path.join(TFDS, "tfrecord"), out


def test_a_corrupt_tfrecord_shard_is_refused_by_path(tmp_path, capsys):
  shutil.copytree(os.path.join(TFDS, "tfrecord", "cifar10"), tmp_path / "cifar10")
  shard = tmp_path / "cifar10" / "3.0.2" / "cifar10-test.tfrecord-00000-of-00001"
  data = bytearray(shard.read_bytes())
  data[200] ^= 0xFF
  shard.write_bytes(bytes(data))
  code, out = run(capsys, "--task=image", f"--data_dir={tmp_path}")
  assert code == 1, out
  assert f"{shard}: record 0 at offset 0" in out and "the data's CRC does not match" in out


def test_missing_tfds_data_is_built_where_possible_else_the_command_explained(
    tmp_path, capsys, monkeypatch):
  code, out = run(capsys, "--task=text", f"--data_dir={tmp_path}")
  assert code == 1, out
  assert "TensorFlow, which `tfds build` needs, is not installed here" in out
  assert "tfds build imdb_reviews --data_dir=<dir>`, copy <dir>/imdb_reviews into" in out
  # Where tfds build can run, it runs (here it copies the fixture, as a build would write it).
  calls = []
  monkeypatch.setattr(prepare, "can_build", lambda name: (True, ""))
  monkeypatch.setattr(prepare, "build", lambda name, data_dir: calls.append(name) or shutil.copytree(
      os.path.join(TFDS, "tfrecord", name), os.path.join(data_dir, name)))
  code, out = run(capsys, "--task=image", f"--data_dir={tmp_path}", "--no_build")
  assert code == 1 and "building is off (--no_build)" in out and not calls, out
  code, out = run(capsys, "--task=image", f"--data_dir={tmp_path}")
  assert code == 0 and calls == ["cifar10"], out
  assert f"building TFDS cifar10 into {tmp_path}" in out and flag_value(out) == str(tmp_path)
