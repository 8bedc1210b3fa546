"""Pathfinder's generator: Linsley et al.'s, rewritten, writing LRA's official file layout.

The layout (pathfinder.py, the loader, reads it): `<root>/pathfinder<res>/<difficulty directory>/`
with `imgs/<k>/sample_<i>.png` and `metadata/<k>.npy` (text: `imgs/<k> sample_<i>.png <i> <label>`
per line). Its names (resolutions, difficulty directories, `difficulty_path`) are defined here, as
the generator needs them and the loader builds on the generator.

The generator is Linsley et al.'s (2018) `snakes2.py` as `snakes2_wrapper.py` drives it
(drewlinsley/pathfinder at ab9c130), rewritten for speed, with LRA's arguments per resolution (the
docstrings of `lra_benchmarks/data/pathfinder.py`). Per image: a label coin; two target snakes of
`contour_length` dashes grown side by side from seeds `seed_distance` apart, the first seed at
least 2 * seed_distance from the border (near the centre at 32x32); then up to `num_distractors`
distractor snakes of contour_length // 3 dashes, each skipped after 5 failed tries; a round marker
on the free end of one target's first dash, and the second marker on the far end of the same
target (label 1) or of the other one (label 0).
Dashes are drawn at `antialias_scale` times the resolution and Lanczos-downsampled, as are the
markers, so strokes are gray and anti-aliased; successive dashes of a snake are separated by a gap
of about 2 * margin, and different snakes may nearly touch or cross each other's newest dash. The
label is thus perceptual (good continuation), not pixel connectivity: `render` reports which snake
each marker sits on. The original's quirks that shape the data are kept, since LRA's images have
them (docs/pathfinder_generator.md lists them); its random draws too are made in its order, so the
same numbers drive both to the same images.
"""
from __future__ import annotations

from collections.abc import Iterator
import dataclasses
import functools
import math
import os
import shutil
import sys
from typing import NamedTuple
import uuid

import numpy as np
from PIL import Image
from PIL import ImageDraw
import tqdm

DIFFICULTIES = {"easy": "curv_baseline", "medium": "curv_contour_length_9",
                "hard": "curv_contour_length_14"}
CONTOUR_LENGTH = {"curv_baseline": 6, "curv_contour_length_9": 9, "curv_contour_length_14": 14}
RESOLUTIONS = (32, 64, 128, 256)

# Bump whenever the generator's output for a given spec changes, so caches named after the spec
# (cache_name) never serve images drawn by an older algorithm.
_GENERATOR_VERSION = 2

# LRA's arguments to the original generator per resolution. Where LRA's docstring names none, the
# value is the generator's own: Args' defaults in snakes2_wrapper.py (padding 22, paddle length 5,
# seed distance 27, paddle contrast 1) or what that wrapper sets before generating. `budget` is
# the distractor budget: num_distractors = budget // (contour_length // 3), integer division as in
# LRA's 32x32 arguments and in the Python 2 the larger sets were generated with (their `/` on
# integers floors).
_LRA_ARGS = {
    32: dict(padding=1, margins=(1,), dash_length=2, dash_thickness=0.5, antialias_scale=2,
             marker_radius=1.5, seed_distance=7, continuity=1.0, budget=20,
             snake_contrasts=(2.0,), paddle_contrasts=(0.75,)),
    64: dict(padding=1, margins=(1,), dash_length=5, dash_thickness=1.0, antialias_scale=2,
             marker_radius=2.5, seed_distance=12, continuity=1.8, budget=22,
             snake_contrasts=(0.8,), paddle_contrasts=(1.0,)),
    128: dict(padding=1, margins=(2, 3), dash_length=5, dash_thickness=1.5, antialias_scale=2,
              marker_radius=3.0, seed_distance=20, continuity=1.8, budget=35,
              snake_contrasts=(0.9,), paddle_contrasts=(1.0,)),
    256: dict(padding=22, margins=(3,), dash_length=5, dash_thickness=2.0, antialias_scale=2,
              marker_radius=5.0, seed_distance=27, continuity=1.8, budget=30,
              snake_contrasts=(1.0,), paddle_contrasts=(1.0,)),
}
# The original's retry limits and thresholds (snakes2_wrapper.py's Args, snakes.py).
_DASH_TRIES = 3  # max_paddle_retrial = 2: a seed or a dash is drawn at most 3 times.
_DISTRACTOR_TRIES = 5  # max_distractor_contour_retrial = 4.
_FREE = 0.3  # A pixel is free for a seed or a dash end where the mask is at most this.
_COLLISION = 1.8  # A dash is refused where its mask plus the image's mask reaches this.
_MIN_FREE_SHARE = 0.01  # Distractors stop seeding once under 1% of the pixels are free.
_MIN_TOTAL_WEIGHT = 1e-4  # A snake is stuck when its candidate directions weigh less than this.
# The original retries the two targets forever; LRA's settings need a few hundred attempts per
# image at most on average, so hitting this means the settings leave no room.
_TARGET_TRIES = 100_000


def difficulty_dir(difficulty: str) -> str:
  """Maps "easy"/"medium"/"hard" or an official directory name to the directory name."""
  if difficulty in DIFFICULTIES:
    return DIFFICULTIES[difficulty]
  if difficulty in CONTOUR_LENGTH:
    return difficulty
  raise ValueError(f"Unknown Pathfinder difficulty {difficulty!r}; expected one of "
                   f"{sorted(DIFFICULTIES)} or {sorted(CONTOUR_LENGTH)}.")


def _check_resolution(resolution: int) -> None:
  if resolution not in RESOLUTIONS:
    raise ValueError(f"Unknown Pathfinder resolution {resolution}; expected one of {RESOLUTIONS}.")


def difficulty_path(root: str, resolution: int, difficulty: str) -> str:
  """`<root>/pathfinder<res>/<difficulty dir>`, the directory holding imgs/ and metadata/."""
  _check_resolution(resolution)
  return os.path.join(root, f"pathfinder{resolution}", difficulty_dir(difficulty))



@dataclasses.dataclass(frozen=True)
class Drawing:
  """Drawing parameters of a spec with LRA's values filled in (lengths in pixels).

  The original calls a dash a paddle; its argument names are given where ours differ.
  """
  padding: int  # No dash end or seed within this many pixels of the border.
  margins: tuple[int, ...]  # paddle_margin_list: one drawn per image; the room kept around dashes.
  dash_length: int  # paddle_length.
  dash_thickness: float  # paddle_thickness: line width; times antialias_scale a whole number.
  antialias_scale: int  # Dashes and markers are drawn this many times larger, then downsampled.
  marker_radius: float
  seed_distance: int  # Between the two targets' seeds.
  continuity: float  # Higher: straighter snakes.
  num_distractors: int  # num_distractor_snakes: tried, and skipped when there is no room.
  distractor_length: int
  snake_contrasts: tuple[float, ...]  # Distractor dashes; targets: each snake draws one of these...
  paddle_contrasts: tuple[float, ...]  # ...and each of its dashes this times one of these.


def _exact(value: float) -> str:
  # repr(float): the shortest exact spelling, so 2 and 2.0 agree and no two values collide.
  return repr(float(value))


def _exact_list(values: tuple[float, ...]) -> str:
  return "-".join(_exact(v) for v in values)


@dataclasses.dataclass(frozen=True)
class GeneratorSpec:
  """Everything that determines a generated Pathfinder difficulty. None means LRA's value."""
  resolution: int = 32
  contour_length: int = 14  # 6 (curv_baseline), 9 or 14.
  num_images: int = 200_000  # The release's count per difficulty.
  batch_size: int = 1000  # Images per imgs/<k>/ directory and metadata/<k>.npy, as the release.
  seed: int = 0
  padding: int | None = None
  margins: tuple[int, ...] | None = None
  dash_length: int | None = None
  dash_thickness: float | None = None
  antialias_scale: int | None = None
  marker_radius: float | None = None
  seed_distance: int | None = None
  continuity: float | None = None
  num_distractors: int | None = None
  snake_contrasts: tuple[float, ...] | None = None
  paddle_contrasts: tuple[float, ...] | None = None

  def __post_init__(self):
    _check_resolution(self.resolution)
    if self.contour_length not in CONTOUR_LENGTH.values():
      raise ValueError(f"GeneratorSpec.contour_length must be one of "
                       f"{sorted(CONTOUR_LENGTH.values())}, got {self.contour_length}.")
    if self.num_images < 1 or self.batch_size < 1:
      raise ValueError(f"GeneratorSpec needs num_images >= 1 and batch_size >= 1, got {self}.")
    d = self.drawing
    blown = d.dash_thickness * d.antialias_scale
    if not (d.dash_thickness > 0 and d.antialias_scale >= 1 and blown == round(blown)):
      # The line is drawn round(thickness * scale) wide; the original refuses what doesn't round.
      raise ValueError(f"GeneratorSpec needs dash_thickness > 0 whose product with "
                       f"antialias_scale >= 1 is a whole number, got {d}.")
    # padding 0 would take the whole image: the original's border is mask[-padding:].
    if (d.dash_length < 1 or not d.margins or min(d.margins) < 0 or d.padding < 1
        or d.seed_distance < 0 or d.marker_radius < 0 or d.continuity <= 0
        or d.num_distractors < 0):
      raise ValueError(f"GeneratorSpec needs dash_length >= 1, padding >= 1, margins >= 0 (at "
                       f"least one), seed_distance, marker_radius, num_distractors >= 0 and "
                       f"continuity > 0, got {d}.")
    if (not d.snake_contrasts or not d.paddle_contrasts
        or min(d.snake_contrasts + d.paddle_contrasts) <= 0):
      raise ValueError(f"GeneratorSpec needs non-empty, positive contrasts, got {d}.")

  @property
  def difficulty(self) -> str:
    return next(k for k, v in CONTOUR_LENGTH.items() if v == self.contour_length)

  @property
  def num_batches(self) -> int:
    return -(-self.num_images // self.batch_size)

  @property
  def drawing(self) -> Drawing:
    """The drawing parameters, LRA's per-resolution values where the spec says None."""
    lra = _LRA_ARGS[self.resolution]
    distractor_length = self.contour_length // 3

    def pick(name):
      value = getattr(self, name)
      return lra[name] if value is None else value

    return Drawing(
        padding=pick("padding"), margins=tuple(int(m) for m in pick("margins")),
        dash_length=pick("dash_length"), dash_thickness=pick("dash_thickness"),
        antialias_scale=pick("antialias_scale"), marker_radius=pick("marker_radius"),
        seed_distance=pick("seed_distance"), continuity=pick("continuity"),
        num_distractors=(lra["budget"] // distractor_length if self.num_distractors is None
                         else self.num_distractors),
        distractor_length=distractor_length,
        snake_contrasts=tuple(float(c) for c in pick("snake_contrasts")),
        paddle_contrasts=tuple(float(c) for c in pick("paddle_contrasts")))

  def cache_name(self) -> str:
    """A readable directory name that differs whenever any (resolved) setting differs."""
    d = self.drawing
    return (f"pathfinder-v{_GENERATOR_VERSION}_r{self.resolution}_cl{self.contour_length}"
            f"_s{self.seed}_n{self.num_images}_b{self.batch_size}_pd{d.padding}"
            f"_mg{'-'.join(str(m) for m in d.margins)}_dl{d.dash_length}"
            f"_th{_exact(d.dash_thickness)}_aa{d.antialias_scale}_mr{_exact(d.marker_radius)}"
            f"_sd{d.seed_distance}_ct{_exact(d.continuity)}_nd{d.num_distractors}"
            f"_sc{_exact_list(d.snake_contrasts)}_pc{_exact_list(d.paddle_contrasts)}")


# ---------------------------------------------------------------------------------------------
# Rendering: the original's geometry and drawing, on numbers that stay the same as its own.


def _bytescale(values: np.ndarray) -> np.ndarray:
  """Float image -> uint8 stretched to 0..255, as SciPy's bytescale (behind its imsave/imresize)."""
  low, high = values.min(), values.max()
  scale = 255.0 / (high - low if high > low else 1)
  return (((values - low) * scale).clip(0, 255) + 0.5).astype(np.uint8)


def _lanczos(values: np.ndarray, size: tuple[int, int]) -> np.ndarray:
  """Downsamples a float image to (rows, cols) as the original's imresize(interp='lanczos')."""
  image = Image.fromarray(_bytescale(values))
  return np.asarray(image.resize((size[1], size[0]), Image.Resampling.LANCZOS))


def _disk(radius: float) -> np.ndarray:
  """[n, 2] integer (row, col) offsets within radius of the origin."""
  r = int(math.floor(radius))
  rows, cols = np.mgrid[-r:r + 1, -r:r + 1]
  inside = rows**2 + cols**2 <= radius**2
  return np.stack([rows[inside], cols[inside]], -1)


@functools.lru_cache(maxsize=1 << 14)
def _displacement(angle: float, distance: float) -> tuple[float, float]:
  # NumPy's sin and cos, as the original's: the ceilings below are sensitive to the last bit.
  return float(float(distance) * np.sin(angle)), float(float(distance) * np.cos(angle))


def _step(point, angle: float, distance: float) -> tuple[int, int]:
  """The pixel `distance` from point along angle (row = sin), rounded up as the original does."""
  rows, cols = _displacement(angle, distance)
  return math.ceil(point[0] + rows), math.ceil(point[1] + cols)


def _reverse(angle: float) -> float:
  return angle + np.pi if angle < 0 else angle - np.pi


def _random_angle(rng) -> float:
  """A whole number of degrees in [-180, 180), in radians."""
  return int(rng.integers(-180, 180)) * np.pi / 180


def _choose(rng, values: tuple[float, ...]) -> float:
  return values[int(rng.integers(0, len(values)))]


@dataclasses.dataclass
class _Dash:
  """One dash direction's drawing, for a dash whose start lies at the patch centre."""
  line: np.ndarray  # uint8 [P, P] the downsampled line.
  mask: np.ndarray  # float64 [P, P] its footprint grown by the margin, in [0, 1].
  # Offsets (rows, cols) from a seed at which this dash, started there, leaves a full-strength
  # mask; read at the seed and compared with the free threshold, they decide whether it may start.
  kernel: tuple[np.ndarray, np.ndarray]
  # True when some pixel of the image has all its kernel offsets outside the image: OpenCV's
  # dilation then yields -DBL_MAX there, which the original takes for "no free pixel at all", so
  # no snake can start in this direction (at 32x32, only 30 of the 360 degrees can).
  unusable_seed: bool
  lines: dict[float, np.ndarray] = dataclasses.field(default_factory=dict)

  def line_at(self, contrast: float) -> np.ndarray:
    """float64 [P, P] the line times contrast, rounded to float32 as the original stores it."""
    if contrast not in self.lines:
      scaled = self.line.astype(np.float64) / 255
      if contrast != 1.0:
        scaled *= contrast
      self.lines[contrast] = scaled.astype(np.float32).astype(np.float64)
    return self.lines[contrast]


class _Candidates(NamedTuple):
  rows: np.ndarray
  cols: np.ndarray
  angles: np.ndarray  # From the pivot.
  flat: np.ndarray  # Indices into a padded mask.
  offsets: np.ndarray | None  # Indices into _Stencils' shared offsets, if those apply.


class _Stencils:
  """What a resolution, the drawing and the image's margin fix: dash patches per direction, seed
  kernels, candidate ends, the empty mask."""

  def __init__(self, resolution: int, padding: int, dash_length: int, dash_thickness: float,
               margin: int, antialias_scale: int, continuity: float):
    self.res = resolution
    self.continuity = continuity
    self.length = dash_length
    self.thickness = dash_thickness
    self.margin = margin
    self.scale = antialias_scale
    # A dash's patch reaches this far from its start: length, the line's width, the margin.
    self.half = dash_length + math.ceil(dash_thickness) + margin
    self.size = 2 * self.half + 1
    # Candidate ends of the next dash: about one per pixel of a circle of radius length + margin
    # around the pivot that lies `margin` beyond the previous dash.
    radius = dash_length + margin
    angles = np.arange(0, 360, 360.0 / (2 * radius * np.pi)) * np.pi / 180
    self.circle = (radius * np.sin(angles), radius * np.cos(angles))
    # The original samples that circle around each pivot and keeps the distinct pixels in the
    # image. floor(pivot + x) is pivot + floor(x) unless x lies within round-off of a whole
    # number; where that holds for every pivot a snake can reach, every pivot sees the same
    # offsets (cut to the image), whose turn weights are cached per direction of growth.
    offsets = np.unique(np.stack([np.floor(c) for c in self.circle], -1).astype(np.intp), axis=0)
    self.offset_rows, self.offset_cols = offsets[:, 0], offsets[:, 1]
    self.offset_angles = np.arctan2(offsets[:, 0], offsets[:, 1])
    self.pivot_reach = 3 * (dash_length + 2 * margin) + 2
    pivots = np.arange(-self.pivot_reach, resolution + self.pivot_reach)[:, None]
    self.shared_offsets = all(
        np.array_equal(np.floor(pivots + c).astype(np.intp) - pivots,
                       np.broadcast_to(np.floor(c).astype(np.intp), (len(pivots), len(c))))
        for c in self.circle)
    self.offset_weights: dict[float, np.ndarray] = {}
    # Canvases are padded so that reads around any pixel of the image need no bounds checks.
    self.pad = self.half + 1
    width = resolution + 2 * self.pad
    near = _disk(margin)  # The room kept free around a dash's far end.
    self.near = (near[:, 0] * width + near[:, 1])[:, None]
    self.dashes: dict[tuple[int, int], _Dash] = {}
    self.dash_by_angle: dict[float, _Dash] = {}
    # Snakes grow from the same pivots again and again across attempts; bounded for 256x256.
    self.candidates = functools.lru_cache(maxsize=1 << 13)(self._candidates)
    self.window = functools.lru_cache(maxsize=1 << 15)(self._window)
    # A canvas's mask before any dash: the border of `padding` pixels taken, -inf outside.
    self.empty_mask = np.full((width, width), -np.inf)
    inner = self.empty_mask[self.pad:self.pad + resolution, self.pad:self.pad + resolution]
    inner[...] = 0
    inner[:padding] = inner[resolution - padding:] = 1
    inner[:, :padding] = inner[:, resolution - padding:] = 1

  def _candidates(self, pivot: tuple[int, int]) -> _Candidates | None:
    """The next dash's possible far ends around pivot, in the original's order (by row, then
    column), or None if none lies in the image."""
    res = self.res
    if self.shared_offsets and all(-self.pivot_reach <= p < res + self.pivot_reach
                                   for p in pivot):
      rows, cols = pivot[0] + self.offset_rows, pivot[1] + self.offset_cols
      offsets = np.flatnonzero((rows >= 0) & (rows < res) & (cols >= 0) & (cols < res))
      if not offsets.size:
        return None
      rows, cols, angles = rows[offsets], cols[offsets], self.offset_angles[offsets]
    else:
      rows, cols = pivot[0] + self.circle[0], pivot[1] + self.circle[1]
      inside = (rows >= 0) & (rows < res) & (cols >= 0) & (cols < res)
      if not inside.any():
        return None
      ends = np.unique(rows[inside].astype(np.intp) * res + cols[inside].astype(np.intp))
      rows, cols = np.divmod(ends, res)
      angles, offsets = np.arctan2(rows - pivot[0], cols - pivot[1]), None
    flat = (rows + self.pad) * (res + 2 * self.pad) + cols + self.pad
    return _Candidates(rows, cols, angles, flat, offsets)

  def turn_weights(self, candidates: _Candidates, heading: float) -> np.ndarray:
    """cos^2(min(turn * continuity, pi/2)) of each candidate for a snake growing along heading."""
    if candidates.offsets is None:
      return self._turn_weights(candidates.angles, heading)
    if heading not in self.offset_weights:
      self.offset_weights[heading] = self._turn_weights(self.offset_angles, heading)
    return self.offset_weights[heading][candidates.offsets]

  def _turn_weights(self, angles: np.ndarray, heading: float) -> np.ndarray:
    turn = np.abs(angles - heading)
    turn = np.minimum(turn, 2 * np.pi - turn)
    return np.maximum(np.cos(np.minimum(turn * self.continuity, 0.5 * np.pi)), 0)**2

  def _window(self, start: tuple[int, int]
              ) -> tuple[tuple[slice, slice], tuple[slice, slice], tuple[slice, slice]]:
    """A dash patch centred on start, cut to the image: (image slices, the same in a padded
    mask, patch slices)."""
    window, padded, patch = [], [], []
    for centre in start:
      low, high = max(centre - self.half, 0), min(centre + self.half, self.res - 1)
      first = low - (centre - self.half)
      window.append(slice(low, high + 1))
      padded.append(slice(low + self.pad, high + 1 + self.pad))
      patch.append(slice(first, first + max(high - low + 1, 0)))
    return tuple(window), tuple(padded), tuple(patch)

  def dash(self, angle: float) -> _Dash:
    """The dash drawn from the patch centre along angle; drawn once per blown-up end pixel."""
    if angle not in self.dash_by_angle:
      centre = self.half * self.scale
      end = _step((centre, centre), angle, self.length * self.scale)
      if end not in self.dashes:
        self.dashes[end] = self._draw(end)
      self.dash_by_angle[angle] = self.dashes[end]
    return self.dash_by_angle[angle]

  def _draw(self, end: tuple[int, int]) -> _Dash:
    blown = 2 * self.half * self.scale + 1
    centre = self.half * self.scale
    image = Image.new("F", (blown, blown), 0.0)
    ImageDraw.Draw(image).line([(centre, centre), (end[1], end[0])], fill=255,
                               width=int(round(self.thickness * self.scale)))
    line = np.asarray(image, np.float64)
    size = (self.size, self.size)
    grown = _grow(line > 0, _disk(self.margin * self.scale))
    mask_u8 = _lanczos(np.where(grown, 255, 0).astype(np.uint8), size)
    mask = (mask_u8.astype(np.float64) / 255).astype(np.float32).astype(np.float64)
    kernel = self._kernel(mask_u8)
    return _Dash(line=_lanczos(line, size), mask=mask, kernel=kernel,
                 unusable_seed=_unusable(kernel, self.res))

  def _kernel(self, mask_u8: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # The original dilates with the dash's full-strength mask pixels, cut to a window of
    # 2 * (length + margin) + 1 whose centre is the anchor but whose dash starts one pixel down
    # and right of it: the offsets below are patch positions shifted by that pixel.
    reach = self.length + self.margin
    rows, cols = np.nonzero(mask_u8 == 255)
    rows, cols = rows - self.half + 1, cols - self.half + 1
    keep = (np.abs(rows) <= reach) & (np.abs(cols) <= reach)
    return rows[keep], cols[keep]


def _unusable(kernel: tuple[np.ndarray, np.ndarray], resolution: int) -> bool:
  """Whether some pixel of the image sees every kernel offset fall outside it."""
  covered = np.zeros((resolution, resolution), bool)
  for dr, dc in zip(*kernel):
    covered[max(0, -dr):resolution - max(0, dr), max(0, -dc):resolution - max(0, dc)] = True
  return not covered.all()


def _grow(mask: np.ndarray, offsets: np.ndarray) -> np.ndarray:
  """Binary dilation of mask by the given (row, col) offsets; outside the image counts as empty."""
  reach = int(np.abs(offsets).max()) if len(offsets) else 0
  rows, cols = mask.shape
  padded = np.zeros((rows + 2 * reach, cols + 2 * reach), bool)
  padded[reach:reach + rows, reach:reach + cols] = mask
  out = np.zeros_like(mask)
  for dr, dc in offsets:
    out |= padded[reach + dr:reach + dr + rows, reach + dc:reach + dc + cols]
  return out


@functools.lru_cache(maxsize=None)
def _stencils(resolution: int, padding: int, dash_length: int, dash_thickness: float,
              margin: int, antialias_scale: int, continuity: float) -> _Stencils:
  return _Stencils(resolution, padding, dash_length, dash_thickness, margin, antialias_scale,
                   continuity)


class _Failed(Exception):
  """A seed or a dash found no room: the targets start over, a distractor is tried again."""


class _Stroke(NamedTuple):
  """A dash placed in the image: its patch cut to the image, and its contrast."""
  dash: _Dash
  window: tuple[slice, slice]  # Image rows and columns covered, the same in a padded mask...
  padded: tuple[slice, slice]
  patch: tuple[slice, slice]  # ...and the matching part of the patch.
  contrast: float


@dataclasses.dataclass
class _Snake:
  pivot: tuple[int, int]  # The point `margin` beyond the newest dash; the next one grows from it.
  angle: float  # Direction of growth at the pivot.
  points: list[tuple[int, int]]  # The first dash's free end, then each later dash's far end.
  # Its dashes in order. The newest one's mask joins the canvas only once the next dash is placed,
  # so a snake never collides with its own previous dash.
  strokes: list[_Stroke]


class _Canvas:
  """One attempt at an image: the mask of taken room, the drawn image, and the growth rules.

  The mask is padded with -inf, so reads around any pixel of the image need no bounds checks and
  outside pixels never count as taken (as in OpenCV's dilation); writes are cut to the image.
  """

  def __init__(self, resolution: int, d: Drawing, stencils: _Stencils, rng):
    self.res = resolution
    self.d = d
    self.st = stencils
    self.rng = rng
    self.pad = stencils.pad
    self.mask = stencils.empty_mask.copy()
    self.image = np.zeros((resolution, resolution))
    self.touched = False  # Whether the mask has changed since it was empty.

  def clear(self) -> None:
    """Back to an empty mask for the next attempt (most fail before touching it)."""
    if self.touched:
      np.copyto(self.mask, self.st.empty_mask)
      self.touched = False

  def inner(self, mask: np.ndarray) -> np.ndarray:
    return mask[self.pad:self.pad + self.res, self.pad:self.pad + self.res]

  def _inside(self, point: tuple[int, int]) -> bool:
    return 0 <= point[0] < self.res and 0 <= point[1] < self.res

  def _place(self, dash: _Dash, start: tuple[int, int], contrast: float) -> _Stroke:
    """dash drawn from start: its patch is centred there and cut to the image."""
    return _Stroke(dash, *self.st.window(start), contrast)

  def _commit(self, mask: np.ndarray, stroke: _Stroke) -> None:
    window = mask[stroke.padded]
    np.maximum(window, stroke.dash.mask[stroke.patch], out=window)

  def _collides(self, mask: np.ndarray, stroke: _Stroke) -> bool:
    sums = mask[stroke.padded] + stroke.dash.mask[stroke.patch]
    return bool(sums.size) and np.maximum.reduce(sums, axis=None) >= _COLLISION

  def _draw(self, stroke: _Stroke) -> None:
    image = self.image[stroke.window]
    np.maximum(image, stroke.dash.line_at(stroke.contrast)[stroke.patch], out=image)

  def _free_starts(self, mask: np.ndarray, band: int, dash: _Dash) -> np.ndarray:
    """Row-major flat indices of the pixels where dash may start, with a taken border of band."""
    res = self.res
    taken = self.inner(mask) > _FREE
    taken[:band] = taken[res - band:] = True
    taken[:, :band] = taken[:, res - band:] = True
    # Only pixels within the kernel's reach of the band's inside can be free: the dilation is
    # computed on that square (plus the reach it reads), not on the whole image.
    reach = self.st.length + self.st.margin
    low, high = max(band - reach, 0), min(res - band + reach, res)
    if high <= low:
      return np.zeros(0, np.intp)
    first, last = max(low - reach, 0), min(high + reach, res)
    grown = _grow(taken[first:last, first:last], np.stack(dash.kernel, -1))
    rows, cols = np.nonzero(~grown[low - first:high - first, low - first:high - first])
    return (rows + low) * res + cols + low

  def _seed(self, mask: np.ndarray, band: int, stop_when_full: bool, contrast: float) -> _Snake:
    """A snake's first dash, started on a free pixel at least band from the border, or _Failed."""
    rng = self.rng
    for _ in range(_DASH_TRIES):
      angle = _random_angle(rng)
      dash = self.st.dash(angle)
      if stop_when_full and (np.count_nonzero(self.inner(mask) <= _FREE)
                             / self.res**2 < _MIN_FREE_SHARE):
        raise _Failed
      if dash.unusable_seed:
        raise _Failed
      free = self._free_starts(mask, band, dash)
      if not free.size:
        raise _Failed
      tail = tuple(int(v) for v in divmod(int(free[int(rng.integers(0, free.size))]), self.res))
      snake = self._start(tail, angle, dash, contrast)
      if snake:
        return snake
    raise _Failed

  def _start(self, tail: tuple[int, int], angle: float, dash: _Dash, contrast: float
             ) -> _Snake | None:
    """A snake whose first dash runs from tail along angle; None if that dash leaves the image."""
    head = _step(tail, angle, self.d.dash_length)
    pivot = _step(head, _reverse(angle), self.d.dash_length + self.st.margin)
    if not (self._inside(head) and self._inside(pivot)):
      return None
    return _Snake(pivot, angle, [tail], [self._place(dash, tail, contrast)])

  def _extend(self, snake: _Snake, mask: np.ndarray, contrast: float) -> None:
    """Adds one dash to snake (drawing it is left to the caller), or raises _Failed."""
    st, rng = self.st, self.rng
    pivot = _step(snake.pivot, snake.angle, st.length + 2 * st.margin)
    candidates = st.candidates(pivot)
    if candidates is None:
      raise _Failed
    weights = st.turn_weights(candidates, snake.angle)
    # The room at each candidate end: the mask's maximum over a disk of radius margin.
    # (The ufuncs' own reductions: this is the generator's innermost loop.)
    weights = (1 - np.maximum.reduce(mask.reshape(-1)[candidates.flat + st.near])) * weights
    total = np.add.reduce(weights)
    if total < _MIN_TOTAL_WEIGHT:
      raise _Failed
    cumulative = np.add.accumulate(weights / total)
    for _ in range(_DASH_TRIES):
      # The first candidate whose cumulative weight exceeds the draw (the first one if round-off
      # leaves none, as the original's argmax does).
      i = int(cumulative.searchsorted(rng.random(), "right")) % len(cumulative)
      end = int(candidates.rows[i]), int(candidates.cols[i])
      angle = float(candidates.angles[i])
      # Drawn from its far end back towards the pivot.
      stroke = self._place(st.dash(_reverse(angle)), end, contrast)
      if not self._collides(mask, stroke):
        break
    else:
      raise _Failed
    self._commit(mask, snake.strokes[-1])
    snake.pivot, snake.angle = pivot, angle
    snake.points.append(end)
    snake.strokes.append(stroke)

  def grow_targets(self, contour_length: int) -> list[_Snake]:
    """The two targets, grown one dash each in turn, or _Failed (the attempt is discarded)."""
    d, rng = self.d, self.rng
    if len(d.snake_contrasts) == 1:
      snake_contrasts = d.snake_contrasts * 2
    else:  # Two of the list repeated twice, shuffled.
      order = rng.permutation(2 * len(d.snake_contrasts))[:2] % len(d.snake_contrasts)
      snake_contrasts = tuple(d.snake_contrasts[i] for i in order)
    snakes = []
    for which, snake_contrast in enumerate(snake_contrasts):
      # The original draws these first dashes' contrasts only when there is a choice.
      paddle = (_choose(rng, d.paddle_contrasts) if len(d.paddle_contrasts) > 1
                else d.paddle_contrasts[0])
      if which == 0:
        # At least 2 * seed_distance from the border (near the centre at 32x32).
        snake = self._seed(self.mask, 2 * d.seed_distance, False, paddle * snake_contrast)
      else:
        snake = self._second_seed(snakes[0].points[0], paddle * snake_contrast)
      snakes.append(snake)
    self.touched = True
    for _ in range(contour_length - 1):
      paddle = _choose(rng, d.paddle_contrasts)
      for snake, snake_contrast in zip(snakes, snake_contrasts):
        self._extend(snake, self.mask, paddle * snake_contrast)
    # As in the original, only the second target's newest dash joins the mask: distractors may
    # overlap the first target's last dash.
    self._commit(self.mask, snakes[1].strokes[-1])
    # Nothing reads the image while snakes grow, so only a successful attempt draws.
    for snake in snakes:
      for stroke in snake.strokes:
        self._draw(stroke)
    return snakes

  def _second_seed(self, first: tuple[int, int], contrast: float) -> _Snake:
    """seed_distance from the first seed in a random direction; only its dash must fit the image."""
    d, rng = self.d, self.rng
    for _ in range(_DASH_TRIES):
      angle = _random_angle(rng)
      toward = int(rng.integers(0, 360)) * np.pi / 180
      tail = (int(np.round(first[0] + d.seed_distance * np.sin(toward))),
              int(np.round(first[1] + d.seed_distance * np.cos(toward))))
      snake = self._start(tail, angle, self.st.dash(angle), contrast)
      if snake:
        return snake
    raise _Failed

  def add_distractors(self) -> list[_Snake]:
    """Tries each distractor up to _DISTRACTOR_TRIES times and skips it if all fail."""
    drawn = []
    for _ in range(self.d.num_distractors):
      for _ in range(_DISTRACTOR_TRIES):
        try:
          drawn.append(self._distractor())
          break
        except _Failed:
          continue
    return drawn

  def _distractor(self) -> _Snake:
    d, rng = self.d, self.rng
    snake = self._seed(self.mask, 1, True, _choose(rng, d.snake_contrasts))
    mask = self.mask.copy()  # A failed distractor leaves no trace.
    for _ in range(d.distractor_length - 1):
      self._extend(snake, mask, _choose(rng, d.snake_contrasts))
    self._commit(mask, snake.strokes[-1])
    self.mask = mask
    for stroke in snake.strokes:
      self._draw(stroke)
    return snake

  def finish(self, markers: tuple[tuple[int, int], tuple[int, int]]) -> np.ndarray:
    """The uint8 image with both markers, stretched to 0..255 as the original saves it."""
    circles = [_marker(self.res, m, self.d.marker_radius, self.d.antialias_scale) for m in markers]
    return _bytescale(np.maximum(self.image, np.maximum(*circles).astype(np.float64) / 255))


def _marker(resolution: int, centre: tuple[int, int], radius: float, scale: int) -> np.ndarray:
  """uint8 [res, res]: a disk drawn at scale times the resolution, Lanczos-downsampled."""
  blown = np.arange(resolution * scale)
  rows, cols = blown[:, None] - centre[0] * scale, blown[None, :] - centre[1] * scale
  disk = (cols**2 + rows**2 <= (radius * scale)**2).astype(np.float64)
  return _lanczos(disk, (resolution, resolution))


def render(spec: GeneratorSpec, rng) -> tuple[np.ndarray, int, dict]:
  """Draws one sample: (uint8 [res, res] image, label, info).

  rng: a np.random.Generator, or anything with its integers(low, high), random() and (for more
  than one snake contrast) permutation(n).
  info: "markers" int [2, 2] (row, col) centres of the two markers; "marked_paths" (i, j): the
  markers sit on the start of paths[i] and the end of paths[j], label = (i == j); "paths" int
  [n, 2] arrays of each snake's dash ends (see _Snake.points), the two targets first, then the
  distractors drawn; "num_distractors" how many were drawn; "target_attempts" how many attempts
  the targets took.
  """
  d = spec.drawing
  label = int(rng.integers(0, 2))
  margin = int(_choose(rng, d.margins))
  stencils = _stencils(spec.resolution, d.padding, d.dash_length, d.dash_thickness, margin,
                       d.antialias_scale, d.continuity)
  canvas = _Canvas(spec.resolution, d, stencils, rng)
  for attempt in range(1, _TARGET_TRIES + 1):
    try:
      targets = canvas.grow_targets(spec.contour_length)
      break
    except _Failed:
      canvas.clear()
  else:
    raise RuntimeError(f"Could not place the two targets of {spec} in {_TARGET_TRIES} attempts: "
                       f"the settings leave no room in a {spec.resolution}x{spec.resolution} "
                       f"image.")
  distractors = canvas.add_distractors()
  first = int(rng.integers(0, 2))
  second = first if label == 1 else 1 - first
  markers = (targets[first].points[0], targets[second].points[-1])
  image = canvas.finish(markers)
  return image, label, {
      "markers": np.array(markers), "marked_paths": (first, second),
      "paths": [np.array(s.points) for s in targets + distractors],
      "num_distractors": len(distractors), "target_attempts": attempt}


# ---------------------------------------------------------------------------------------------
# Writing the official layout.


def num_in_batch(spec: GeneratorSpec, k: int) -> int:
  """Number of images in batch k (the last batch may be short)."""
  return min(spec.batch_size, spec.num_images - k * spec.batch_size)


def iter_batch_info(spec: GeneratorSpec, k: int) -> Iterator[tuple[np.ndarray, int, dict]]:
  """Yields batch k's (image, label, info) from render, sample_0 first."""
  if not 0 <= k < spec.num_batches:
    raise ValueError(f"Batch {k} out of range: {spec} has {spec.num_batches} batches.")
  # One stream per batch, so that any batch can be (re)generated alone and comes out identical.
  rng = np.random.default_rng([spec.seed, spec.resolution, spec.contour_length, k])
  for _ in range(num_in_batch(spec, k)):
    yield render(spec, rng)


def iter_batch(spec: GeneratorSpec, k: int) -> Iterator[tuple[np.ndarray, int]]:
  """Yields batch k's (image, label) pairs, sample_0 first: exactly what generate() writes."""
  for image, label, _ in iter_batch_info(spec, k):
    yield image, label


def write_batches(spec: GeneratorSpec, root: str, batches: list[int], progress: bool) -> None:
  directory = difficulty_path(root, spec.resolution, spec.difficulty)
  imgs_dir = os.path.join(directory, "imgs")
  meta_dir = os.path.join(directory, "metadata")
  os.makedirs(imgs_dir, exist_ok=True)
  os.makedirs(meta_dir, exist_ok=True)
  total = sum(num_in_batch(spec, k) for k in batches)
  with tqdm.tqdm(total=total, desc=f"Generating Pathfinder{spec.resolution} {spec.difficulty}",
                 unit="img", file=sys.stderr, disable=not progress) as bar:
    for k in batches:
      # A batch's images go to a temporary directory renamed into place, and its metadata file,
      # written last and also renamed into place, marks the batch complete: an interrupted run
      # leaves no metadata line pointing at a missing or truncated image.
      temp_dir = os.path.join(imgs_dir, f".{k}.{uuid.uuid4().hex}.tmp")
      temp_meta = os.path.join(meta_dir, f".{k}.{uuid.uuid4().hex}.tmp")
      try:
        os.makedirs(temp_dir)
        lines = []
        for i, (image, label) in enumerate(iter_batch(spec, k)):
          Image.fromarray(image).save(os.path.join(temp_dir, f"sample_{i}.png"), format="PNG")
          lines.append(f"imgs/{k} sample_{i}.png {i} {label}\n")
          bar.update(1)
        final_dir = os.path.join(imgs_dir, str(k))
        final_meta = os.path.join(meta_dir, f"{k}.npy")
        if os.path.lexists(final_meta):
          os.remove(final_meta)  # Rewriting: the batch is incomplete until the new file lands.
        if os.path.lexists(final_dir):
          # Left by an interrupted run (its metadata is missing) or by an earlier generate().
          shutil.rmtree(final_dir)
        os.replace(temp_dir, final_dir)
        # Not tempfile.mkstemp: its 0600 mode would stick to the final file; "x" honours the umask.
        with open(temp_meta, "x", encoding="utf-8", newline="\n") as f:
          f.writelines(lines)
        os.replace(temp_meta, final_meta)
      finally:
        if os.path.exists(temp_dir):
          shutil.rmtree(temp_dir)
        if os.path.exists(temp_meta):
          os.remove(temp_meta)


def generate(spec: GeneratorSpec, root: str, progress: bool = True) -> None:
  """Writes (or rewrites) every batch of spec in the official layout under root."""
  write_batches(spec, root, list(range(spec.num_batches)), progress)
