"""Pathfinder trees side by side: Linsley et al.'s generator and ours.

See docs/pathfinder_generator.md for the results and the commands. Subcommands:

  original --src DIR --out ROOT   Runs the original generator (snakes2.py of drewlinsley/pathfinder
                                  at ab9c130, checked out in DIR) with LRA's arguments into ROOT, in
                                  the official layout, plus records.jsonl per difficulty. Needs a
                                  separate venv with numpy, scipy, opencv-python-headless and
                                  pillow; the shims it needs on Python 3 are applied here.
  ours --out ROOT                 Our generator's tree, plus records.jsonl from render's info.
  stats A B                       The comparison table (markdown) for two trees.
  grid A B --out PNG              A side-by-side grid of images of both trees.
  exact --src DIR                 Runs both generators on the same random numbers (the original's
                                  global NumPy stream) and counts byte-identical images; in the
                                  original's venv.
  speed                           Seconds per 1,000 images of our generate() (PNG writes included).

Statistics (per difficulty, over every image the metadata lists):
  mean intensity        mean pixel value / 255.
  nonzero share         share of pixels > 0.
  gray levels           distinct pixel values per image, averaged.
  markers               the two markers, found in the image alone: the pixel with the largest
                        3x3 sum, then the largest 3x3 sum at least 3 pixels (Chebyshev) from it.
  connected             markers joined by an 8-connected path of lit pixels (value >= 128).
  path length           from records.jsonl: the polyline through a target's dash ends (the first
                        dash's free end, then the far end of each later dash), both targets. Images
                        alone don't tell it: the shortest lit route between the markers cuts
                        across other snakes (docs/pathfinder_generator.md).
  distractors           from records.jsonl: distractors drawn per image, and the nominal count.
  shortcut              label accuracy of a threshold on the distance between the two markers
                        found: the first half of the images (metadata order) fits the threshold
                        and its side (label 1 below or above it) by best accuracy, the second half
                        is scored, and the same with the halves swapped; the two scores averaged.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import sys
import tempfile
import time
import types

import numpy as np
from PIL import Image
from PIL import ImageDraw
from PIL import ImageFont

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIFFICULTIES = (("curv_baseline", 6), ("curv_contour_length_9", 9), ("curv_contour_length_14", 14))
LIT = 128

# LRA's arguments to the original generator per resolution (the docstrings of
# lra_benchmarks/data/pathfinder.py); everything else keeps snakes2_wrapper.py's Args defaults.
_LRA_ORIGINAL_ARGS = {
    32: dict(paddle_margin_list=[1], window_size=[32, 32], padding=1, paddle_length=2,
             marker_radius=1.5, paddle_thickness=0.5, antialias_scale=2, seed_distance=7,
             continuity=1.0, budget=20, snake_contrast_list=[2], paddle_contrast_list=[0.75]),
    64: dict(padding=1, paddle_margin_list=[1], seed_distance=12, window_size=[64, 64],
             marker_radius=2.5, paddle_thickness=1, antialias_scale=2, continuity=1.8, budget=22,
             snake_contrast_list=[0.8]),
    128: dict(padding=1, paddle_margin_list=[2, 3], seed_distance=20, window_size=[128, 128],
              marker_radius=3, paddle_thickness=1.5, antialias_scale=2, continuity=1.8,
              budget=35, snake_contrast_list=[0.9]),
    256: dict(paddle_margin_list=[3], window_size=[256, 256], marker_radius=5,
              paddle_thickness=2, antialias_scale=2, continuity=1.8, budget=30,
              snake_contrast_list=[1.0]),
}
# snakes2_wrapper.py's Args defaults, and what that wrapper sets for every data set.
_ORIGINAL_DEFAULTS = dict(
    batch_id=0, window_size=[256, 256], padding=22, antialias_scale=4, LABEL=1, seed_distance=27,
    marker_radius=3, contour_length=15, distractor_length=5, num_distractor_snakes=6,
    snake_contrast_list=[1.], use_single_paddles=False, max_target_contour_retrial=4,
    max_distractor_contour_retrial=4, max_paddle_retrial=2, continuity=1.4, paddle_length=5,
    paddle_thickness=1.5, paddle_margin_list=[4], paddle_contrast_list=[1.],
    pause_display=False, save_images=True, save_metadata=True, segmentation_task=False,
    segmentation_task_double_circle=False)


# ---------------------------------------------------------------------------------------------
# Running the original (in its own venv).


def _bytescale(data: np.ndarray) -> np.ndarray:
  """scipy.misc.bytescale as in SciPy 1.2 (its defaults)."""
  if data.dtype == np.uint8:
    return data
  low, high = data.min(), data.max()
  scale = 255.0 / (high - low if high != low else 1)
  return (((data - low) * scale).clip(0, 255) + 0.5).astype(np.uint8)


def _toimage(array) -> Image.Image:
  data = np.asarray(array)
  return Image.frombytes("L", (data.shape[1], data.shape[0]), _bytescale(data).tobytes())


def _imresize(array, size, interp="bilinear", mode=None):
  """scipy.misc.imresize as in SciPy 1.2, for the 2-D arrays and (rows, cols) sizes used."""
  del mode
  filters = {"nearest": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3, "cubic": 3}
  return np.array(_toimage(array).resize((size[1], size[0]), resample=filters[interp]))


def _imsave(name, array):
  _toimage(array).save(name)


def _import_original(src: str):
  """Imports snakes2 from src with the shims Python 3 and current libraries need."""
  import scipy  # pylint: disable=import-outside-toplevel
  misc = types.ModuleType("scipy.misc")
  misc.imresize, misc.imsave = _imresize, _imsave
  scipy.misc = misc
  sys.modules["scipy.misc"] = misc
  if not hasattr(np, "float"):
    np.float = float
  if not hasattr(np, "round_"):
    np.round_ = np.round
  # Only the display code, never called here, uses matplotlib.
  pyplot = types.ModuleType("matplotlib.pyplot")
  matplotlib = types.ModuleType("matplotlib")
  matplotlib.pyplot = pyplot
  sys.modules.setdefault("matplotlib", matplotlib)
  sys.modules.setdefault("matplotlib.pyplot", pyplot)
  sys.path.insert(0, src)
  import snakes  # pylint: disable=import-outside-toplevel,import-error
  import snakes2  # pylint: disable=import-outside-toplevel,import-error
  return snakes, snakes2


def _original_args(resolution: int, contour_length: int, path: str, num_images: int):
  lra = dict(_LRA_ORIGINAL_ARGS[resolution])
  budget = lra.pop("budget")
  args = types.SimpleNamespace(**{**_ORIGINAL_DEFAULTS, **lra})
  args.contour_path, args.n_images = path, num_images
  args.contour_length = contour_length
  args.distractor_length = contour_length // 3
  args.num_distractor_snakes = budget // args.distractor_length
  return args


class _Recorder:
  """Wraps the original's functions to record each image's geometry (its files stay untouched)."""

  def __init__(self, snakes, snakes2):
    self.records, self.current = [], {}
    make_snake, make_many = snakes.make_snake, snakes.make_many_snakes
    extend, two_snakes, circle = snakes.extend_snake, snakes2.two_snakes, snakes2.draw_circle

    def counted_make_snake(*a, **k):
      out = make_snake(*a, **k)
      self.current["num_distractors"] += bool(out[2])
      return out

    def counted_make_many(image, mask, num_snakes, *a, **k):
      self.current.update(num_distractors=0, nominal_distractors=num_snakes)
      return make_many(image, mask, num_snakes, *a, **k)

    def recorded_extend(*a, **k):
      out = extend(*a, **k)
      if self.current.get("heads") is not None and out[-1]:
        self.current["heads"].append([int(v) for v in out[5]])
      return out

    def recorded_two_snakes(*a, **k):
      self.current["heads"] = []
      out = two_snakes(*a, **k)
      heads = self.current.pop("heads")
      if out[-1]:  # The snakes are extended in turn: even heads are the first's.
        self.current["paths"] = [[[int(v) for v in out[2][s]]] + heads[s::2] for s in (0, 1)]
      return out

    def recorded_circle(window, coordinate, radius, scale):
      markers = self.current.setdefault("markers", [])
      markers.append([int(v) for v in coordinate])
      if len(markers) == 2:
        self.records.append(self.current)
        self.current = {}
      return circle(window, coordinate, radius, scale)

    snakes.make_snake, snakes.make_many_snakes = counted_make_snake, counted_make_many
    snakes.extend_snake, snakes2.two_snakes = recorded_extend, recorded_two_snakes
    snakes2.draw_circle = recorded_circle


def _run_original(snakes2, args) -> float:
  start = time.perf_counter()
  with contextlib.redirect_stdout(io.StringIO()):  # It prints a line per image.
    snakes2.from_wrapper(args)
  return time.perf_counter() - start


def _metadata_as_text(path: str) -> None:
  """The original saves metadata with np.save; the LRA release has them as text lines."""
  meta = os.path.join(path, "metadata", "0.npy")
  rows = np.load(meta)
  with open(meta, "w", encoding="utf-8") as f:
    f.writelines(" ".join(str(v) for v in row) + "\n" for row in rows)


def cmd_original(a) -> None:
  snakes, snakes2 = _import_original(a.src)
  recorder = _Recorder(snakes, snakes2)
  for directory, contour_length in DIFFICULTIES:
    if contour_length not in a.contour_lengths:
      continue
    path = os.path.join(a.out, f"pathfinder{a.resolution}", directory)
    if os.path.exists(os.path.join(path, "metadata", "0.npy")):
      sys.exit(f"{path} already has metadata; the original refuses to overwrite it.")
    np.random.seed(a.seed + contour_length)
    random.seed(a.seed + contour_length)
    recorder.records.clear()
    seconds = _run_original(snakes2, _original_args(a.resolution, contour_length, path, a.num))
    _metadata_as_text(path)
    _write_records(path, recorder.records)
    print(f"original {directory}: {a.num} images in {seconds:.1f} s")


def _write_records(path: str, records: list[dict]) -> None:
  with open(os.path.join(path, "records.jsonl"), "w", encoding="utf-8") as f:
    f.writelines(json.dumps(r) + "\n" for r in records)


class _LegacyStream:
  """NumPy's global legacy stream behind render's rng interface: the original's own numbers."""

  def integers(self, low, high):
    return np.random.randint(low, high)

  def random(self):
    return np.random.rand()

  def permutation(self, n):
    return np.random.permutation(n)


def cmd_exact(a) -> None:
  snakes, snakes2 = _import_original(a.src)
  sys.path.insert(0, ROOT)
  # pylint: disable-next=import-outside-toplevel
  from spt_jax.data import pathfinder_generator as generator
  del snakes
  with tempfile.TemporaryDirectory() as tmp:
    for directory, contour_length in DIFFICULTIES:
      if contour_length not in a.contour_lengths:
        continue
      path = os.path.join(tmp, directory)
      np.random.seed(a.seed + contour_length)
      _run_original(snakes2, _original_args(a.resolution, contour_length, path, a.num))
      labels = [int(row[3]) for row in np.load(os.path.join(path, "metadata", "0.npy"))]
      np.random.seed(a.seed + contour_length)
      spec = generator.GeneratorSpec(resolution=a.resolution, contour_length=contour_length)
      same = 0
      for i, label in enumerate(labels):
        image, ours_label, _ = generator.render(spec, _LegacyStream())
        with Image.open(os.path.join(path, "imgs", "0", f"sample_{i}.png")) as png:
          same += ours_label == label and np.array_equal(image, np.asarray(png))
      print(f"exact pathfinder{a.resolution} {directory}: {same} of {len(labels)} images "
            f"identical (pixels and label)")


# ---------------------------------------------------------------------------------------------
# Ours.


def cmd_ours(a) -> None:
  sys.path.insert(0, ROOT)
  # pylint: disable-next=import-outside-toplevel
  from spt_jax.data import pathfinder_generator as generator
  for directory, contour_length in DIFFICULTIES:
    spec = generator.GeneratorSpec(resolution=a.resolution, contour_length=contour_length,
                                    num_images=a.num, batch_size=a.num, seed=a.seed)
    start = time.perf_counter()
    generator.generate(spec, a.out, progress=False)
    seconds = time.perf_counter() - start
    path = generator.difficulty_path(a.out, a.resolution, directory)
    records = []
    for i, (image, _, info) in enumerate(generator.iter_batch_info(spec, 0)):
      with Image.open(os.path.join(path, "imgs", "0", f"sample_{i}.png")) as png:
        assert np.array_equal(image, np.asarray(png)), "render is not deterministic"
      records.append(dict(markers=info["markers"].tolist(),
                          paths=[p.tolist() for p in info["paths"][:2]],
                          num_distractors=info["num_distractors"],
                          nominal_distractors=spec.drawing.num_distractors))
    _write_records(path, records)
    print(f"ours {directory}: {a.num} images in {seconds:.1f} s")


def cmd_speed(a) -> None:
  sys.path.insert(0, ROOT)
  # pylint: disable-next=import-outside-toplevel
  from spt_jax.data import pathfinder_generator as generator
  for directory, contour_length in DIFFICULTIES:
    spec = generator.GeneratorSpec(contour_length=contour_length, num_images=a.num,
                                    seed=a.seed)
    with tempfile.TemporaryDirectory() as tmp:
      start, cpu = time.perf_counter(), time.process_time()
      generator.generate(spec, tmp, progress=False)
      seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    # CPU time is what a busy machine's other work leaves alone (one thread throughout).
    print(f"speed pathfinder32 {directory}: {a.num} images in {seconds:.1f} s "
          f"({cpu:.1f} s CPU) = {1000 * seconds / a.num:.1f} s per 1,000 "
          f"({1000 * cpu / a.num:.1f} s CPU)")


# ---------------------------------------------------------------------------------------------
# Statistics.


def read_tree(root: str, resolution: int, directory: str):
  """(uint8 [N, res, res] images, int [N] labels, records or None) in metadata order."""
  path = os.path.join(root, f"pathfinder{resolution}", directory)
  meta_dir = os.path.join(path, "metadata")
  names = sorted((n for n in os.listdir(meta_dir) if n.endswith(".npy") and n[:-4].isdigit()),
                 key=lambda n: int(n[:-4]))
  images, labels = [], []
  for name in names:
    with open(os.path.join(meta_dir, name), encoding="utf-8") as f:
      for line in f:
        fields = line.split()
        if not fields:
          continue
        png = os.path.join(path, fields[0], fields[1])
        if not os.path.getsize(png):
          continue  # The release's one empty image.
        with Image.open(png) as image:
          images.append(np.asarray(image.convert("L")))
        labels.append(int(fields[3]))
  records = None
  if os.path.exists(os.path.join(path, "records.jsonl")):
    with open(os.path.join(path, "records.jsonl"), encoding="utf-8") as f:
      records = [json.loads(line) for line in f]
  return np.stack(images), np.array(labels), records


def _box3(image: np.ndarray) -> np.ndarray:
  padded = np.pad(image.astype(np.int64), 1)
  n = image.shape[0]
  return sum(padded[r:r + n, c:c + n] for r in range(3) for c in range(3))


def find_markers(image: np.ndarray) -> np.ndarray:
  """int [2, 2] (row, col) of the two markers: the two largest 3x3 sums >= 3 pixels apart."""
  score = _box3(image)
  first = np.unravel_index(np.argmax(score), score.shape)
  rows, cols = np.indices(score.shape)
  score[np.maximum(abs(rows - first[0]), abs(cols - first[1])) < 3] = -1
  second = np.unravel_index(np.argmax(score), score.shape)
  return np.array([first, second])


def _brightest_near(image: np.ndarray, point) -> tuple[int, int]:
  """The brightest pixel of the 3x3 block around point: where a marker is surely lit."""
  r0, c0 = max(point[0] - 1, 0), max(point[1] - 1, 0)
  block = image[r0:point[0] + 2, c0:point[1] + 2]
  r, c = np.unravel_index(np.argmax(block), block.shape)
  return r0 + int(r), c0 + int(c)


def _shift(values: np.ndarray, dr: int, dc: int, fill) -> np.ndarray:
  """out[r, c] = values[r - dr, c - dc] (fill where that is outside)."""
  out = np.full_like(values, fill)
  n, m = values.shape
  out[max(dr, 0):n + min(dr, 0), max(dc, 0):m + min(dc, 0)] = (
      values[max(-dr, 0):n + min(-dr, 0), max(-dc, 0):m + min(-dc, 0)])
  return out


def connected(lit: np.ndarray, a, b) -> bool:
  """Whether b is reachable from a through 8-connected lit pixels."""
  if not (lit[a] and lit[b]):
    return False
  reach = np.zeros_like(lit)
  reach[a] = True
  while True:
    grown = reach.copy()
    for dr in (-1, 0, 1):
      for dc in (-1, 0, 1):
        grown |= _shift(reach, dr, dc, False)
    grown &= lit
    if grown[b]:
      return True
    if np.array_equal(grown, reach):
      return False
    reach = grown


def _threshold_accuracy(fit_d, fit_y, test_d, test_y) -> float:
  """Fits (threshold, side) on fit by accuracy and returns the accuracy on test."""
  cuts = np.concatenate([[-np.inf], np.unique(fit_d), [np.inf]])
  best, best_acc = (np.inf, 1), -1.0
  for cut in cuts:
    for side in (1, 0):  # side 1: label 1 at or below the cut.
      guess = (fit_d <= cut) == bool(side)
      acc = np.mean(guess == fit_y)
      if acc > best_acc:
        best, best_acc = (cut, side), acc
  cut, side = best
  return float(np.mean(((test_d <= cut) == bool(side)) == test_y))


def shortcut_accuracy(distances: np.ndarray, labels: np.ndarray) -> float:
  """The 2-fold held-out accuracy of a threshold on marker distance (see the module doc)."""
  half = len(labels) // 2
  first, second = slice(0, half), slice(half, None)
  return 0.5 * (_threshold_accuracy(distances[first], labels[first], distances[second],
                                    labels[second]) +
                _threshold_accuracy(distances[second], labels[second], distances[first],
                                    labels[first]))


def tree_stats(images: np.ndarray, labels: np.ndarray, records) -> dict:
  found = np.stack([find_markers(image) for image in images])
  lit = images >= LIT
  joined = np.array([connected(l, _brightest_near(i, m[0]), _brightest_near(i, m[1]))
                     for i, l, m in zip(images, lit, found)])
  out = {
      "n": len(labels), "label 1 share": labels.mean(),
      "mean intensity": images.mean() / 255, "nonzero share": (images > 0).mean(),
      "gray levels": np.mean([len(np.unique(i)) for i in images]),
      "connected 1": (joined[labels == 1].sum(), (labels == 1).sum()),
      "connected 0": (joined[labels == 0].sum(), (labels == 0).sum()),
      "shortcut": shortcut_accuracy(np.hypot(*(found[:, 0] - found[:, 1]).T), labels),
  }
  if records is not None:
    truth = np.array([r["markers"] for r in records])
    hits = [min(np.abs(f - t).max(axis=1).max(), np.abs(f[::-1] - t).max(axis=1).max()) <= 1
            for f, t in zip(found, truth)]
    paths = [np.array(p, float) for r in records for p in r["paths"]]
    out.update({
        "markers found": np.mean(hits),
        "path record": np.mean([np.linalg.norm(np.diff(p, axis=0), axis=1).sum() for p in paths]),
        "distractors": np.mean([r["num_distractors"] for r in records]),
        "nominal": records[0]["nominal_distractors"],
        "shortcut record": shortcut_accuracy(np.hypot(*(truth[:, 0] - truth[:, 1]).T), labels),
    })
  return out


def _share(hits: int, n: int) -> str:
  """hits / n in percent with its Wilson 95% interval: rare events need many images."""
  p, z = hits / n, 1.96
  centre = (p + z * z / (2 * n)) / (1 + z * z / n)
  half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
  return f"{100 * p:.1f}% [{100 * (centre - half):.1f}-{100 * (centre + half):.1f}]"


_ROWS = [
    ("mean intensity (/255)", lambda s: f"{s['mean intensity']:.3f}"),
    ("nonzero pixel share", lambda s: f"{s['nonzero share']:.3f}"),
    ("distinct gray levels per image", lambda s: f"{s['gray levels']:.1f}"),
    (f"markers connected through lit (>= {LIT}) pixels, label 1 [95% interval]",
     lambda s: _share(*s["connected 1"])),
    (f"markers connected through lit (>= {LIT}) pixels, label 0 [95% interval]",
     lambda s: _share(*s["connected 0"])),
    ("target path length, px (records)",
     lambda s: f"{s['path record']:.1f}" if "path record" in s else "n/a"),
    ("distractors drawn (nominal), records",
     lambda s: f"{s['distractors']:.2f} ({s['nominal']})" if "distractors" in s else "n/a"),
    ("label from marker distance alone: markers found in the image",
     lambda s: f"{100 * s['shortcut']:.1f}%"),
    ("label from marker distance alone: recorded markers",
     lambda s: f"{100 * s['shortcut record']:.1f}%" if "shortcut record" in s else "n/a"),
    ("markers found within 1 px of the recorded ones",
     lambda s: f"{100 * s['markers found']:.1f}%" if "markers found" in s else "n/a"),
    ("images (label 1 share)", lambda s: f"{s['n']} ({s['label 1 share']:.2f})"),
]


def cmd_stats(a) -> None:
  names = a.names or [os.path.basename(os.path.normpath(a.first)),
                      os.path.basename(os.path.normpath(a.second))]
  stats = {}
  for name, root in zip(names, (a.first, a.second)):
    stats[name] = [tree_stats(*read_tree(root, a.resolution, d)) for d, _ in DIFFICULTIES]
  lengths = " / ".join(str(c) for _, c in DIFFICULTIES)
  print(f"| statistic | {names[0]} cl {lengths} | {names[1]} cl {lengths} |")
  print("|---|---|---|")
  for title, cell in _ROWS:
    print(f"| {title} | " + " | ".join(" / ".join(cell(s) for s in stats[n]) for n in names)
          + " |")


# ---------------------------------------------------------------------------------------------
# The grid.


def cmd_grid(a) -> None:
  per_side, zoom, gap = a.per_side, a.zoom, 8
  size = a.resolution * zoom
  names = a.names or ["original", "ours"]
  font = ImageFont.load_default(size=18)
  header, label_width = 34, 120
  width = label_width + 2 * per_side * (size + gap) + 3 * gap
  height = header + len(DIFFICULTIES) * (size + gap + 22)
  canvas = Image.new("L", (width, height), 40)
  draw = ImageDraw.Draw(canvas)
  for side, name in enumerate(names):
    left = label_width + side * (per_side * (size + gap) + 2 * gap)
    draw.text((left, 8), name, fill=255, font=font)
  for row, (directory, contour_length) in enumerate(DIFFICULTIES):
    top = header + row * (size + gap + 22)
    draw.text((8, top + size // 2 - 10), f"contour {contour_length}", fill=255, font=font)
    for side, root in enumerate((a.first, a.second)):
      images, labels, _ = read_tree(root, a.resolution, directory)
      # Alternate labels, so each side shows both kinds.
      picks = [np.flatnonzero(labels == (i + 1) % 2)[i // 2] for i in range(per_side)]
      for i, pick in enumerate(picks):
        left = label_width + side * (per_side * (size + gap) + 2 * gap) + i * (size + gap)
        tile = Image.fromarray(images[pick]).resize((size, size), Image.Resampling.NEAREST)
        canvas.paste(tile, (left, top))
        draw.text((left, top + size + 1), f"label {labels[pick]}", fill=200, font=font)
  canvas.save(a.out, optimize=True)
  print(f"grid: wrote {a.out} ({width}x{height})")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = parser.add_subparsers(dest="command", required=True)
  for name in ("original", "exact"):
    p = sub.add_parser(name)
    p.add_argument("--src", required=True, help="checkout of drewlinsley/pathfinder at ab9c130")
    p.add_argument("--contour-lengths", type=int, nargs="+", default=[c for _, c in DIFFICULTIES])
  sub.choices["original"].add_argument("--out", required=True)
  sub.add_parser("ours").add_argument("--out", required=True)
  sub.add_parser("speed")
  for name in ("stats", "grid"):
    p = sub.add_parser(name)
    p.add_argument("first")
    p.add_argument("second")
    p.add_argument("--names", nargs=2)
  sub.choices["grid"].add_argument("--out", required=True)
  sub.choices["grid"].add_argument("--per-side", type=int, default=4)
  sub.choices["grid"].add_argument("--zoom", type=int, default=5)
  defaults = dict(original=300, exact=100, ours=300, speed=1000, stats=0, grid=0)
  for name, p in sub.choices.items():
    p.add_argument("--resolution", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num", type=int, default=defaults[name], help="images per difficulty")
  a = parser.parse_args()
  {"original": cmd_original, "exact": cmd_exact, "ours": cmd_ours, "speed": cmd_speed,
   "stats": cmd_stats, "grid": cmd_grid}[a.command](a)


if __name__ == "__main__":
  main()
