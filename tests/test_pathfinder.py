"""Tests for the Pathfinder generator, the official file layout and the loader.

`python tests/test_pathfinder.py` rewrites the committed fixture (tests/fixtures/pathfinder32/) and
the sample figures (docs/figures/pathfinder_{easy,medium,hard}.png) from the generator.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import sys

import numpy as np
from PIL import Image
import pytest

from spt_jax.data import pathfinder, pathfinder_generator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
FIXTURE_DIR = os.path.join(FIXTURES, "pathfinder32", "curv_contour_length_14")
FIXTURE_SPEC = pathfinder.GeneratorSpec(num_images=20, batch_size=20, seed=3)
EMPTY_SAMPLE = 5  # 0-byte PNG, like the release's pathfinder32/curv_baseline/imgs/0/sample_172.png.
EXTRA_FIELDS_SAMPLE = 3  # Its metadata line carries fields after the label.


def read_bytes(path: str) -> bytes:
  with open(path, "rb") as f:
    return f.read()


def metadata_labels(path: str) -> list[tuple[str, int]]:
  """(png name, label) per line, parsed here rather than by the module."""
  with open(path, encoding="utf-8") as f:
    return [(line.split()[1], int(line.split()[3])) for line in f if line.strip()]


@pytest.mark.parametrize("resolution, contour_length, count", [
    (32, 6, 150), (32, 9, 100), (32, 14, 40), (64, 6, 4), (128, 6, 2), (256, 14, 1),
])
def test_label_is_same_snake_by_geometry(resolution, contour_length, count):
  spec = pathfinder.GeneratorSpec(resolution=resolution, contour_length=contour_length)
  d = spec.drawing
  rng = np.random.default_rng(resolution * 100 + contour_length)
  labels = []
  for _ in range(count):
    image, label, info = pathfinder.render(spec, rng)
    assert image.dtype == np.uint8 and image.shape == (resolution, resolution)
    assert image.max() == 255  # Stretched to 0..255 as the original saves it.
    paths = info["paths"]
    assert len(paths) == 2 + info["num_distractors"] <= 2 + d.num_distractors
    assert [len(p) for p in paths] == [contour_length] * 2 + [d.distractor_length] * (
        len(paths) - 2)
    # The first marker sits on the free end of one target's first dash, the second on the far
    # end of a target's last dash: the label is whether that is the same target.
    first, second = info["marked_paths"]
    assert first in (0, 1) and second in (0, 1)
    assert label == int(first == second)
    assert np.array_equal(info["markers"], [paths[first][0], paths[second][-1]])
    # Two distinct snakes: their seeds lie seed_distance apart (rounded to pixels).
    assert abs(np.hypot(*(paths[0][0] - paths[1][0])) - d.seed_distance) <= 1
    # Each later dash ends length + margin beyond a pivot length + 2 * margin past the previous
    # one: consecutive ends are never further apart than the sum, plus rounding.
    reach = 2 * d.dash_length + 3 * max(d.margins) + 3
    for path in paths:
      assert (np.hypot(*np.diff(path, axis=0).T) <= reach).all()
      assert (image[tuple(path.T)] > 0).all()  # Every dash is drawn from its end.
    # Markers are round blobs at least half as bright as the brightest dash.
    assert (image[tuple(info["markers"].T)] >= 127).all()
    labels.append(label)
  if count >= 100:
    assert 0.4 < np.mean(labels) < 0.6, np.mean(labels)


def distance_threshold_accuracy(distances: np.ndarray, labels: np.ndarray) -> float:
  """Held-out accuracy of the best threshold on distance, fit on one half, scored on the other
  (and the other way round, averaged); 'label 1 below' or 'above', whichever fits better."""
  half = len(labels) // 2
  folds = [(slice(0, half), slice(half, None)), (slice(half, None), slice(0, half))]
  scores = []
  for fit, test in folds:
    best = max(((((distances[fit] <= cut) == below) == labels[fit]).mean(), cut, below)
               for cut in np.unique(distances[fit]) for below in (True, False))
    _, cut, below = best
    scores.append(np.mean(((distances[test] <= cut) == below) == labels[test]))
  return float(np.mean(scores))


# Images per difficulty, as many as a few seconds allow: contour 6, where marker distance tells
# most (about 55%, the original's as ours), gets the 2,000; at 14 that many would take
# ~20 s on one core. docs/pathfinder_generator.md reports 2,000 full images per difficulty.
@pytest.mark.parametrize("contour_length, count", [(6, 2000), (9, 1000), (14, 400)])
def test_marker_distance_alone_does_not_predict_the_label(contour_length, count):
  # In memory and without distractors: the targets and so the markers are placed before any
  # distractor, which cannot move them, so marker geometry is that of full images for less.
  spec = pathfinder.GeneratorSpec(contour_length=contour_length, num_distractors=0)
  rng = np.random.default_rng(contour_length)
  distances, labels = [], []
  for _ in range(count):
    _, label, info = pathfinder.render(spec, rng)
    distances.append(np.hypot(*(info["markers"][0] - info["markers"][1])))
    labels.append(label)
  accuracy = distance_threshold_accuracy(np.array(distances), np.array(labels))
  assert accuracy <= 0.6, accuracy


def test_lra_32_quirks_kept():
  d = pathfinder.GeneratorSpec().drawing
  stencils = pathfinder._stencils(32, d.padding, d.dash_length, d.dash_thickness, d.margins[0],
                                  d.antialias_scale, d.continuity)
  # OpenCV's dilation border leaves only these directions for a snake's first dash (the second
  # target's excepted): the original's, and so LRA's, 32x32 distractors all start this way.
  usable = [deg for deg in range(-180, 180)
            if not stencils.dash(deg * np.pi / 180).unusable_seed]
  assert usable == list(range(-150, -120))
  # Gray, anti-aliased strokes: many gray levels, most pixels dark.
  rng = np.random.default_rng(0)
  images = [pathfinder.render(pathfinder.GeneratorSpec(contour_length=6), rng)[0]
            for _ in range(20)]
  assert np.mean([len(np.unique(i)) for i in images]) >= 30
  assert 0.03 < np.mean(images) / 255 < 0.08


def test_determinism_and_global_rng_untouched():
  spec = pathfinder.GeneratorSpec(contour_length=9)
  state = np.random.get_state()

  def draw(seed):
    rng = np.random.default_rng(seed)
    return [pathfinder.render(spec, rng)[:2] for _ in range(10)]

  first = draw(5)
  again = draw(5)
  assert all(a[0].tobytes() == b[0].tobytes() and a[1] == b[1] for a, b in zip(first, again))
  other = draw(6)
  assert sum(a[0].tobytes() != b[0].tobytes() for a, b in zip(first, other)) == 10
  assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), state))


def test_cache_name_and_spec_validation(monkeypatch):
  base = pathfinder.GeneratorSpec()
  names = {base.cache_name()}
  changes = dict(resolution=64, contour_length=9, num_images=7, batch_size=7, seed=1, padding=2,
                 margins=(2,), dash_length=3, dash_thickness=1.0, antialias_scale=4,
                 marker_radius=2.0, seed_distance=5, continuity=1.5, num_distractors=1,
                 snake_contrasts=(1.0,), paddle_contrasts=(1.0, 0.5))
  assert set(changes) == {f.name for f in dataclasses.fields(base)}
  for name, value in changes.items():
    names.add(dataclasses.replace(base, **{name: value}).cache_name())
  assert len(names) == 1 + len(changes)
  # None means LRA's value, so spelling the default out names the same data set.
  assert pathfinder.GeneratorSpec(marker_radius=1.5, margins=(1,)).cache_name() == (
      base.cache_name())
  assert base.drawing.num_distractors == 20 // (14 // 3)
  assert pathfinder.GeneratorSpec(resolution=128, contour_length=9).drawing.num_distractors == 11
  assert pathfinder.GeneratorSpec(resolution=64, contour_length=14).drawing.num_distractors == 5
  with pytest.raises(ValueError, match="contour_length"):
    pathfinder.GeneratorSpec(contour_length=7)
  with pytest.raises(ValueError, match="resolution"):
    pathfinder.GeneratorSpec(resolution=48)
  with pytest.raises(ValueError, match="whole number"):
    pathfinder.GeneratorSpec(dash_thickness=0.75)
  with pytest.raises(ValueError, match="padding"):
    pathfinder.GeneratorSpec(padding=0)
  monkeypatch.setattr(pathfinder_generator, "_TARGET_TRIES", 50)  # Failing takes every try: few.
  # Seeds 2 * 20 px from every border of a 32x32 image: there is no room for the first target.
  with pytest.raises(RuntimeError, match="leave no room"):
    pathfinder.render(pathfinder.GeneratorSpec(seed_distance=20), np.random.default_rng(0))


def test_reads_committed_fixture(caplog):
  records = pathfinder.split_records(FIXTURES, 32, "hard")
  assert [len(records[s]) for s in pathfinder.SPLITS] == [16, 2, 2]
  expected = metadata_labels(os.path.join(FIXTURE_DIR, "metadata", "0.npy"))
  assert [(os.path.basename(p), label) for s in pathfinder.SPLITS for p, label in records[s]] == (
      expected)
  assert {label for _, label in expected} == {0, 1}
  with caplog.at_level(logging.WARNING):
    train = pathfinder.load_split(FIXTURES, 32, "hard", "train")
  empty = os.path.join(FIXTURE_DIR, "imgs", "0", f"sample_{EMPTY_SAMPLE}.png")
  assert os.path.getsize(empty) == 0
  assert any(empty in r.getMessage() and "empty" in r.getMessage() for r in caplog.records)
  assert any("skipped 1 of 16 images (1 empty)" in r.getMessage() for r in caplog.records)
  kept = [(name, label) for name, label in expected[:16] if name != f"sample_{EMPTY_SAMPLE}.png"]
  assert train["pixels"].dtype == np.uint8 and train["pixels"].shape == (15, 32 * 32)
  assert train["labels"].dtype == np.int32 and train["labels"].tolist() == [l for _, l in kept]
  for row, (name, _) in zip(train["pixels"], kept):
    with Image.open(os.path.join(FIXTURE_DIR, "imgs", "0", name)) as image:
      assert np.array_equal(row, np.asarray(image.convert("L")).ravel())
  # The official directory name works as well, and the other splits are the remaining records.
  for split, names in (("val", expected[16:18]), ("test", expected[18:])):
    batch = pathfinder.load_split(FIXTURES, 32, "curv_contour_length_14", split)
    assert batch["labels"].tolist() == [label for _, label in names]
  _, _, skipped = pathfinder.read_images(records["train"], 32)
  assert skipped == [(empty, "empty: 0-byte file")]


def test_generate_reads_back_identically(tmp_path):
  # 12 batches, so that numeric ordering (2 < 10) differs from the lexicographic one.
  spec = pathfinder.GeneratorSpec(num_images=23, batch_size=2, contour_length=6, seed=3)
  root = str(tmp_path)
  pathfinder.ensure_files(root, 32, "easy", spec)
  directory = pathfinder.difficulty_path(root, 32, "easy")
  assert sorted(os.listdir(os.path.join(directory, "metadata")), key=lambda n: int(n[:-4])) == [
      f"{k}.npy" for k in range(12)]
  images, labels = [], []
  for k in range(spec.num_batches):
    for image, label in pathfinder.iter_batch(spec, k):
      images.append(image.ravel())
      labels.append(label)
  loaded = [pathfinder.load_split(root, 32, "easy", s) for s in pathfinder.SPLITS]
  assert [len(b["labels"]) for b in loaded] == [18, 2, 3]
  assert np.array_equal(np.concatenate([b["pixels"] for b in loaded]), np.stack(images))
  assert np.concatenate([b["labels"] for b in loaded]).tolist() == labels
  with open(os.path.join(directory, "metadata", "11.npy"), encoding="utf-8") as f:
    assert f.read() == f"imgs/11 sample_0.png 0 {labels[22]}\n"
  assert not [n for d in ("imgs", "metadata") for n in os.listdir(os.path.join(directory, d))
              if n.startswith(".")]

  # Complete files are left alone; a missing batch is regenerated alone, identically.
  meta = os.path.join(directory, "metadata", "3.npy")
  png = os.path.join(directory, "imgs", "3", "sample_1.png")
  png_bytes = read_bytes(png)
  stamp = os.stat(os.path.join(directory, "metadata", "4.npy")).st_mtime_ns
  os.remove(meta)
  os.remove(png)
  pathfinder.ensure_files(root, 32, "curv_baseline", spec)
  assert read_bytes(png) == png_bytes
  assert os.stat(os.path.join(directory, "metadata", "4.npy")).st_mtime_ns == stamp
  again = [pathfinder.load_split(root, 32, "easy", s) for s in pathfinder.SPLITS]
  assert all(np.array_equal(a["pixels"], b["pixels"]) for a, b in zip(again, loaded))

  # Same seed, same bytes; generate() from scratch elsewhere reproduces every file.
  pathfinder.generate(spec, str(tmp_path / "copy"), progress=False)
  copy = pathfinder.difficulty_path(str(tmp_path / "copy"), 32, "easy")
  for k in range(spec.num_batches):
    for name in (f"metadata/{k}.npy", f"imgs/{k}/sample_0.png"):
      assert read_bytes(os.path.join(directory, name)) == read_bytes(os.path.join(copy, name))
  with pytest.raises(ValueError, match="pathfinder32/curv_baseline, not pathfinder32/curv_cont"):
    pathfinder.ensure_files(root, 32, "hard", spec)


@pytest.fixture
def fixture_copy(tmp_path):
  shutil.copytree(os.path.join(FIXTURES, "pathfinder32"), tmp_path / "pathfinder32")
  return tmp_path


def test_bad_images_are_reported_and_skipped(fixture_copy, caplog):
  imgs = fixture_copy / "pathfinder32" / "curv_contour_length_14" / "imgs" / "0"
  os.remove(imgs / "sample_0.png")
  (imgs / "sample_1.png").write_bytes(b"not a png")
  Image.fromarray(np.zeros((16, 16), np.uint8)).save(imgs / "sample_2.png")
  with caplog.at_level(logging.WARNING):
    train = pathfinder.load_split(str(fixture_copy), 32, "hard", "train")
  assert len(train["labels"]) == 16 - 4
  messages = "\n".join(r.getMessage() for r in caplog.records)
  for name in ("sample_0.png: missing", "sample_1.png: unreadable", "sample_2.png: wrong shape",
               f"sample_{EMPTY_SAMPLE}.png: empty"):
    assert name in messages
  assert "skipped 4 of 16 images (1 empty, 1 missing, 1 unreadable, 1 wrong shape)" in messages


def test_split_without_readable_images_names_split_and_directory(fixture_copy):
  # The fixture's 20 records cut 16/2/2: val is samples 16 and 17; train and test still load.
  imgs = fixture_copy / "pathfinder32" / "curv_contour_length_14" / "imgs" / "0"
  (imgs / "sample_16.png").write_bytes(b"")
  (imgs / "sample_17.png").write_bytes(b"not a png")
  directory = pathfinder.difficulty_path(str(fixture_copy), 32, "hard")
  with pytest.raises(ValueError) as error:
    pathfinder.load_split(str(fixture_copy), 32, "hard", "val")
  assert str(error.value) == (f"no readable images in the val split of {directory}: 2 of 2 empty "
                              f"or unreadable (1 empty, 1 unreadable).")
  assert len(pathfinder.load_split(str(fixture_copy), 32, "hard", "test")["labels"]) == 2
  # Too few records for a split at all: named before any image is read.
  meta = fixture_copy / "pathfinder32" / "curv_contour_length_14" / "metadata" / "0.npy"
  meta.write_text("".join(meta.read_text(encoding="utf-8").splitlines(True)[:5]), encoding="utf-8")
  with pytest.raises(ValueError, match=r"^no images in the val split of .*: the metadata lists 5 "
                                       r"in all, too few to cut 80/10/10\.$"):
    pathfinder.load_split(str(fixture_copy), 32, "hard", "val")


@pytest.mark.parametrize("line, message", [
    ("imgs/0 sample_20.png 20", "expected at least 4 space-separated fields"),
    ("imgs/0 sample_20.png 20 2", "label .* must be 0 or 1"),
    ("imgs/0 sample_20.png 20 one 1", "label .* must be 0 or 1"),
    ("imgs/0 sample_20.jpg 20 1", "must name a .png file"),
])
def test_malformed_metadata_names_file_and_line(fixture_copy, line, message):
  meta = fixture_copy / "pathfinder32" / "curv_contour_length_14" / "metadata" / "0.npy"
  lines = meta.read_text(encoding="utf-8").splitlines()
  meta.write_text("\n".join(lines[:7] + [line] + lines[7:]) + "\n", encoding="utf-8")
  with pytest.raises(ValueError, match=message) as error:
    pathfinder.load_split(str(fixture_copy), 32, "hard", "test")
  assert str(error.value).startswith(f"{meta}:8: ")
  assert "metadata/0.npy:8: " in str(error.value)


def test_non_text_metadata_and_bad_names(fixture_copy):
  meta_dir = fixture_copy / "pathfinder32" / "curv_contour_length_14" / "metadata"
  (meta_dir / "1.npy").write_bytes(b"imgs/1 sample_0.png 0 1\n\x93NUMPY\xff\n")
  with pytest.raises(ValueError, match=r"metadata/1\.npy:2: not valid UTF-8"):
    pathfinder.split_records(str(fixture_copy), 32, "hard")
  (meta_dir / "1.npy").unlink()
  (meta_dir / "extra.npy").write_text("")
  with pytest.raises(ValueError, match=r"extra\.npy: metadata files must be named <k>\.npy"):
    pathfinder.split_records(str(fixture_copy), 32, "hard")
  with pytest.raises(ValueError, match="difficulty"):
    pathfinder.load_split(str(fixture_copy), 32, "extreme", "train")
  with pytest.raises(ValueError, match="split"):
    pathfinder.load_split(str(fixture_copy), 32, "hard", "dev")


def test_missing_directory(tmp_path):
  expected = os.path.join(str(tmp_path), "pathfinder128", "curv_contour_length_14")
  for call in (lambda: pathfinder.ensure_files(str(tmp_path), 128, "hard", None),
               lambda: pathfinder.load_split(str(tmp_path), 128, "hard", "train")):
    with pytest.raises(FileNotFoundError) as error:
      call()
    assert expected in str(error.value)
    assert "--config.data.generate=True" in str(error.value)
    assert "pathfinder128/curv_contour_length_14/" in str(error.value)
  pathfinder.ensure_files(FIXTURES, 32, "hard", None)  # Present: nothing to do.


# ---------------------------------------------------------------------------------------------
# Regenerating the committed files: `python tests/test_pathfinder.py`.


def write_fixture() -> None:
  """Writes the fixture in the release's layout: 20 images, one 0-byte, one line with extras."""
  shutil.rmtree(os.path.join(FIXTURES, "pathfinder32"), ignore_errors=True)
  imgs = os.path.join(FIXTURE_DIR, "imgs", "0")
  os.makedirs(imgs)
  os.makedirs(os.path.join(FIXTURE_DIR, "metadata"))
  lines = []
  for i, (image, label) in enumerate(pathfinder.iter_batch(FIXTURE_SPEC, 0)):
    path = os.path.join(imgs, f"sample_{i}.png")
    if i == EMPTY_SAMPLE:
      open(path, "wb").close()
    else:
      Image.fromarray(image).save(path, optimize=True)
    extra = " 14 0 1.5 curv" if i == EXTRA_FIELDS_SAMPLE else ""
    lines.append(f"imgs/0 sample_{i}.png {i} {label}{extra}\n")
  with open(os.path.join(FIXTURE_DIR, "metadata", "0.npy"), "w", encoding="utf-8") as f:
    f.writelines(lines)


def write_figures() -> None:
  """One positive and one negative 32x32 sample per difficulty, side by side, upscaled x8."""
  out = os.path.join(ROOT, "docs", "figures")
  os.makedirs(out, exist_ok=True)
  for name, directory in pathfinder.DIFFICULTIES.items():
    spec = pathfinder.GeneratorSpec(contour_length=pathfinder.CONTOUR_LENGTH[directory])
    rng = np.random.default_rng(0)
    by_label = {}
    while len(by_label) < 2:
      image, label, _ = pathfinder.render(spec, rng)
      by_label.setdefault(label, image)
    gap = np.full((32, 1), 128, np.uint8)  # Grey separator; positive left, negative right.
    panel = np.concatenate([by_label[1], gap, by_label[0]], axis=1)
    panel = panel.repeat(8, axis=0).repeat(8, axis=1)
    Image.fromarray(panel).save(os.path.join(out, f"pathfinder_{name}.png"), optimize=True)


if __name__ == "__main__":
  if sys.argv[1:] not in ([], ["--fixture"], ["--figures"]):
    sys.exit(f"usage: {sys.argv[0]} [--fixture | --figures]")
  if sys.argv[1:] != ["--figures"]:
    write_fixture()
  if sys.argv[1:] != ["--fixture"]:
    write_figures()
