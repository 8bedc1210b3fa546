"""Pathfinder (LRA): the official file layout, a loader and a TensorFlow-free generator.

Layout of the LRA release (`lra_release/`), read and written as it is:

  <root>/pathfinder{32,64,128,256}/{curv_baseline,curv_contour_length_9,curv_contour_length_14}/
      imgs/<k>/sample_<i>.png   grayscale res x res PNGs
      metadata/<k>.npy          despite the suffix, TEXT: one line per image,
                                `imgs/<k> sample_<i>.png <i> <label> [more fields]`

LRA splits each difficulty 80/10/10 into train/val/test; here the split is deterministic: all
metadata records in order (k numerically, then line order), first 80% train, next 10% val, last
10% test. Splits are cut on metadata records, before any image is opened, so an unreadable image
never shifts other images between splits.

The generator follows Linsley et al. (2018) in spirit: two target snakes of `contour_length` dashes
plus distractor snakes of contour_length // 3 dashes, a marker at the start of one target and a
second marker at its other end (label 1) or at an end of the other target (label 0). One deliberate
difference: Linsley's dashes are separated by gaps, so that connectedness is perceptual; here each
dash starts where the previous one ends, and different snakes keep at least `clearance` background
pixels between them, so the label is exactly "the markers lie in one 8-connected component of the
nonzero pixels" - a property the tests check on every rendered image.
"""
from __future__ import annotations

from collections.abc import Iterator
import dataclasses
import math
import os
import shutil
import sys
import uuid

from absl import logging
import numpy as np
from PIL import Image
import tqdm

from spt_jax.data import DATA_DIR_HINT

DIFFICULTIES = {"easy": "curv_baseline", "medium": "curv_contour_length_9",
                "hard": "curv_contour_length_14"}
CONTOUR_LENGTH = {"curv_baseline": 6, "curv_contour_length_9": 9, "curv_contour_length_14": 14}
RESOLUTIONS = (32, 64, 128, 256)
SPLITS = ("train", "val", "test")

# Bump whenever the generator's output for a given spec changes, so caches named after the spec
# (cache_name) never serve images drawn by an older algorithm.
_GENERATOR_VERSION = 1

# LRA's per-resolution settings: marker radius, dash thickness (line width), margin, distractor
# budget (distractors = budget / (contour_length / 3)) and continuity. The dash length (res / 16:
# two 14-dash targets span most of the image yet fit beside the distractors with few restarts) and
# the clearance are ours; LRA's dashes have gaps, ours abut. 256 is not among the settings we
# follow: it is 128 scaled by 2 (same counts, every length doubled).
_LRA_DRAWING = {
    32: dict(marker_radius=1.5, dash_thickness=0.5, margin=1, budget=20, continuity=1.0,
             dash_length=2.0, clearance=1),
    64: dict(marker_radius=2.5, dash_thickness=1.0, margin=1, budget=22, continuity=1.8,
             dash_length=4.0, clearance=1),
    128: dict(marker_radius=3.0, dash_thickness=1.5, margin=2, budget=35, continuity=1.8,
              dash_length=8.0, clearance=2),
    256: dict(marker_radius=6.0, dash_thickness=3.0, margin=4, budget=35, continuity=1.8,
              dash_length=16.0, clearance=4),
}
# Candidate directions evaluated (vectorised) for every dash.
_NUM_ANGLES = 24
# Centre-line samples per pixel of dash length: at <= 0.5 px apart, consecutive rounded samples are
# 8-neighbours, so a dash's centre line is 8-connected.
_SAMPLES_PER_PIXEL = 2
_SEED_TRIES = 30
_SNAKE_TRIES = 30
_IMAGE_TRIES = 100
# Individual skipped images logged per load; the rest only count in the summary line.
_MAX_LOGGED_SKIPS = 20


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
  """Drawing parameters of a spec with LRA's defaults filled in (lengths in pixels)."""
  marker_radius: float
  dash_thickness: float  # Line width: pixels within half of it of the centre line are drawn.
  dash_length: float
  margin: int  # Nothing is drawn within this many pixels of the border.
  clearance: int  # Background pixels kept between different snakes (>= 1: never 8-adjacent).
  num_distractors: int
  distractor_length: int
  num_clutter: int
  continuity: float
  seed_distance: float


def _exact(value: float) -> str:
  # repr(float): the shortest exact spelling, so 2 and 2.0 agree and no two values collide.
  return repr(float(value))


@dataclasses.dataclass(frozen=True)
class GeneratorSpec:
  """Everything that determines a generated Pathfinder difficulty. None means LRA's value."""
  resolution: int = 32
  contour_length: int = 14  # 6 (curv_baseline), 9 or 14.
  num_images: int = 200_000  # The release's count per difficulty.
  batch_size: int = 1000  # Images per imgs/<k>/ directory and metadata/<k>.npy, as the release.
  seed: int = 0
  marker_radius: float | None = None
  dash_thickness: float | None = None
  dash_length: float | None = None
  margin: int | None = None
  clearance: int | None = None
  num_distractors: int | None = None
  num_clutter: int = 0  # Single-dash clutter snakes; LRA's Pathfinder has none.
  continuity: float | None = None
  seed_distance: float | None = None  # Minimum distance between the two targets' seeds.

  def __post_init__(self):
    _check_resolution(self.resolution)
    if self.contour_length not in CONTOUR_LENGTH.values():
      raise ValueError(f"GeneratorSpec.contour_length must be one of "
                       f"{sorted(CONTOUR_LENGTH.values())}, got {self.contour_length}.")
    if self.num_images < 1 or self.batch_size < 1:
      raise ValueError(f"GeneratorSpec needs num_images >= 1 and batch_size >= 1, got {self}.")
    d = self.drawing
    if d.clearance < 1:
      raise ValueError(f"GeneratorSpec.clearance must be >= 1 (snakes must never touch), got "
                       f"{d.clearance}.")
    if d.num_distractors < 0 or d.num_clutter < 0 or d.margin < 0:
      raise ValueError(f"GeneratorSpec counts and margin must be >= 0, got {d}.")
    if d.dash_length < 1 or d.dash_thickness < 0 or d.marker_radius < 0 or d.continuity <= 0:
      raise ValueError(f"GeneratorSpec needs dash_length >= 1, dash_thickness >= 0, "
                       f"marker_radius >= 0 and continuity > 0, got {d}.")

  @property
  def difficulty(self) -> str:
    return next(k for k, v in CONTOUR_LENGTH.items() if v == self.contour_length)

  @property
  def num_batches(self) -> int:
    return -(-self.num_images // self.batch_size)

  @property
  def drawing(self) -> Drawing:
    """The drawing parameters, LRA's per-resolution values where the spec says None."""
    lra = _LRA_DRAWING[self.resolution]
    cl = self.contour_length
    if self.num_distractors is not None:
      num_distractors = self.num_distractors
    elif self.resolution == 32:
      num_distractors = lra["budget"] // (cl // 3)  # LRA's 32x32 setting divides integers...
    else:
      num_distractors = int(lra["budget"] / (cl / 3))  # ...the larger ones floats.

    def pick(name):
      value = getattr(self, name)
      return lra[name] if value is None else value

    return Drawing(
        marker_radius=pick("marker_radius"), dash_thickness=pick("dash_thickness"),
        dash_length=pick("dash_length"), margin=pick("margin"), clearance=pick("clearance"),
        num_distractors=num_distractors, distractor_length=cl // 3, num_clutter=self.num_clutter,
        continuity=pick("continuity"),
        seed_distance=self.resolution / 4 if self.seed_distance is None else self.seed_distance)

  def cache_name(self) -> str:
    """A readable directory name that differs whenever any (resolved) setting differs."""
    d = self.drawing
    return (f"pathfinder-v{_GENERATOR_VERSION}_r{self.resolution}_cl{self.contour_length}"
            f"_s{self.seed}_n{self.num_images}_b{self.batch_size}_mr{_exact(d.marker_radius)}"
            f"_th{_exact(d.dash_thickness)}_dl{_exact(d.dash_length)}_mg{d.margin}_cr{d.clearance}"
            f"_nd{d.num_distractors}_nc{d.num_clutter}_ct{_exact(d.continuity)}"
            f"_sd{_exact(d.seed_distance)}")


# ---------------------------------------------------------------------------------------------
# Rendering.


def _disk(radius: float) -> np.ndarray:
  """Integer (row, col) offsets within radius of the origin; always includes the origin."""
  r = int(math.floor(radius))
  rows, cols = np.mgrid[-r:r + 1, -r:r + 1]
  # The epsilon keeps points exactly on the circle (e.g. radius sqrt(2) and (1, 1)) inside
  # despite float round-off in radius**2.
  inside = rows**2 + cols**2 <= radius**2 + 1e-9
  return np.stack([rows[inside], cols[inside]], -1).astype(np.intp)


class _Stuck(Exception):
  """A snake found no room; the caller retries from a new seed or restarts the image."""


@dataclasses.dataclass
class _Snake:
  pixels: np.ndarray  # [n] flat indices into the painter's padded canvas (repeats, markers too).
  start: np.ndarray  # [2] (row, col) in the image of the first centre-line sample.
  end: np.ndarray  # [2] (row, col) in the image of the last centre-line sample.


class _Painter:
  """Grows snakes one at a time on a res x res canvas; a fresh painter per image attempt.

  Maps are padded by a forbidden frame wider than anything a dash or marker can reach, and pixels
  are flat indices into them: a lookup needs no bounds checks or clipping.
  """

  def __init__(self, resolution: int, d: Drawing, rng: np.random.Generator):
    self.res = resolution
    self.d = d
    self.rng = rng
    half_width = d.dash_thickness / 2
    self.pad = pad = int(math.ceil(d.dash_length + half_width + d.marker_radius + d.clearance)) + 2
    self.width = width = resolution + 2 * pad
    # Offsets from floor(sample) that can lie within half_width of the sample; [0, 1] at least,
    # where the nearest pixel always is.
    span = np.arange(math.ceil(-half_width), math.floor(1 + half_width) + 1)
    span = np.union1d(span, [0, 1])
    box_rows, box_cols = np.meshgrid(span, span, indexing="ij")
    self.box = np.stack([box_rows.ravel(), box_cols.ravel()], -1)
    self.half_width_sq = half_width**2
    marker = _disk(d.marker_radius)
    self.marker = marker[:, 0] * width + marker[:, 1]
    c = d.clearance
    halo_rows, halo_cols = np.mgrid[-c:c + 1, -c:c + 1]
    self.halo = (halo_rows * width + halo_cols).ravel()
    n = max(2, int(math.ceil(d.dash_length * _SAMPLES_PER_PIXEL)) + 1)
    # [1, n, 1] distances along a dash; the last one is exactly dash_length, so a dash ends on the
    # very float point (and so pixel) where the next one starts.
    self.steps = np.linspace(0.0, d.dash_length, n)[None, :, None]
    # Pixels a new snake may not touch: the padding and margin frame, plus every committed snake
    # grown by the clearance.
    self.blocked = np.ones((width, width), bool)
    inner = slice(pad + d.margin, pad + resolution - d.margin)
    self.blocked[inner, inner] = False
    self.blocked_flat = self.blocked.reshape(-1)
    self.snakes: list[_Snake] = []

  def _flat(self, rows_cols: np.ndarray) -> np.ndarray:
    """[..., 2] image (row, col) -> [...] flat padded indices."""
    return (rows_cols[..., 0] + self.pad) * self.width + rows_cols[..., 1] + self.pad

  def image_coords(self, flat: np.ndarray) -> np.ndarray:
    """[...] flat padded indices -> [..., 2] image (row, col)."""
    rows, cols = np.divmod(flat, self.width)
    return np.stack([rows - self.pad, cols - self.pad], -1)

  def _pen(self, points: np.ndarray) -> np.ndarray:
    """[..., 2] centre-line samples (image coords) -> [..., B] flat drawn pixels, with repeats.

    A pixel is drawn iff it lies within dash_thickness / 2 of a sample, and the pixel nearest each
    sample always is. Samples are <= 0.5 px apart, so the nearest pixels of consecutive samples are
    8-neighbours; every other pixel of a sample is an 8-neighbour of that sample's nearest pixel
    (thin pens) or joined to it through the same disk (the lattice points of a disk are connected):
    a dash is 8-connected for any thickness, and consecutive dashes share the pixel where they join.
    """
    nearest = self._flat(np.rint(points).astype(np.intp))[..., None]
    if self.half_width_sq < 0.25:
      return nearest  # Two pixels are 1 apart, so only the nearest can be within < 0.5.
    candidates = np.floor(points).astype(np.intp)[..., None, :] + self.box
    within = ((candidates - points[..., None, :])**2).sum(-1) <= self.half_width_sq
    # Pixels out of reach are replaced by the nearest one rather than masked, so that downstream
    # every entry is a drawn pixel and arrays keep a fixed shape.
    return np.where(within, self._flat(candidates), nearest)

  def _pick_seed(self, with_marker: bool, far_from: np.ndarray | None) -> np.ndarray:
    """A free flat pixel (with room for a marker if asked), far enough from far_from."""
    allowed = ~self.blocked
    if far_from is not None:
      rows, cols = np.ogrid[:self.width, :self.width]
      far_row, far_col = far_from + self.pad
      allowed &= np.hypot(rows - far_row, cols - far_col) >= self.d.seed_distance
    candidates = np.flatnonzero(allowed)
    if not candidates.size:
      raise _Stuck
    for _ in range(_SEED_TRIES):
      seed = candidates[self.rng.integers(candidates.size)]
      if not with_marker or not self.blocked_flat[seed + self.marker].any():
        return seed
    raise _Stuck

  def grow(self, num_dashes: int, start_marker: bool, end_marker: bool,
           far_from: np.ndarray | None = None) -> _Snake:
    """Grows one snake (retrying from new seeds) and commits it, or raises _Stuck."""
    for _ in range(_SNAKE_TRIES):
      try:
        snake = self._try_grow(num_dashes, start_marker, end_marker, far_from)
      except _Stuck:
        continue
      self.snakes.append(snake)
      # Committing grows the blocked area by the clearance around every pixel of the snake, so no
      # later snake comes within `clearance` pixels (Chebyshev) of it.
      self.blocked_flat[(snake.pixels[:, None] + self.halo).ravel()] = True
      return snake
    raise _Stuck

  def _try_grow(self, num_dashes: int, start_marker: bool, end_marker: bool,
                far_from: np.ndarray | None) -> _Snake:
    d, rng = self.d, self.rng
    seed = self._pick_seed(start_marker, far_from)
    # The snake may not overlap itself either, except where consecutive pieces join: dash j is
    # checked against dashes <= j - 2, and against the start marker from dash 3 on (the first dashes
    # necessarily leave through the marker).
    own_old = np.zeros_like(self.blocked_flat)
    pieces = [seed + self.marker if start_marker else np.array([seed])]
    start = self.image_coords(seed)
    position = start.astype(np.float64)
    heading = None
    span = min(math.pi, math.pi / (2 * d.continuity))
    for j in range(1, num_dashes + 1):
      if j == 3:
        own_old[pieces[0]] = True
      if j >= 3:
        own_old[pieces[j - 2].ravel()] = True
      offset = rng.random()
      if heading is None:
        angles = (np.arange(_NUM_ANGLES) + offset) * (2 * math.pi / _NUM_ANGLES)
        weights = np.ones(_NUM_ANGLES)
      else:
        # cos^2(min(|turn| * continuity, pi/2)) over turns spread evenly where it is nonzero.
        turns = ((np.arange(_NUM_ANGLES) + offset) / _NUM_ANGLES * 2 - 1) * span
        angles = heading + turns
        weights = np.cos(np.minimum(np.abs(turns) * d.continuity, math.pi / 2))**2
      directions = np.stack([np.sin(angles), np.cos(angles)], -1)  # (row, col) per angle.
      points = position + self.steps * directions[:, None, :]  # [angles, n, 2]
      pixels = self._pen(points).reshape(_NUM_ANGLES, -1)
      forbidden = self.blocked_flat | own_old
      weights = weights * ~forbidden[pixels].any(-1)
      total = weights.sum()
      if total <= 0:
        raise _Stuck
      cumulative = np.cumsum(weights)
      choice = min(int(np.searchsorted(cumulative, rng.random() * total, side="right")),
                   _NUM_ANGLES - 1)
      while weights[choice] <= 0:  # Float round-off at the top of the cumsum.
        choice -= 1
      pieces.append(pixels[choice])
      position = points[choice, -1]
      heading = angles[choice]
    end = np.rint(position).astype(np.intp)
    if end_marker:
      disk = self._flat(end) + self.marker
      if self.blocked_flat[disk].any():
        raise _Stuck
      pieces.append(disk)
    return _Snake(np.concatenate(pieces), start, end)


def render(spec: GeneratorSpec, rng: np.random.Generator) -> tuple[np.ndarray, int, dict]:
  """Draws one sample: (uint8 [res, res] image, label, info).

  info: "markers" int [2, 2] (row, col) centres of the two markers; "marked_paths" the indices of
  the paths they sit on; "path_masks" bool [P, res, res], path 0 the target with the first marker,
  path 1 the other target, then the distractors and the clutter; each mask includes its markers.
  """
  d = spec.drawing
  res = spec.resolution
  label = int(rng.integers(2))
  # For a negative, which end of the other target carries the second marker.
  other_at_start = bool(rng.integers(2))
  for _ in range(_IMAGE_TRIES):
    painter = _Painter(res, d, rng)
    try:
      first = painter.grow(spec.contour_length, start_marker=True, end_marker=label == 1)
      other = painter.grow(spec.contour_length, start_marker=label == 0 and other_at_start,
                           end_marker=label == 0 and not other_at_start, far_from=first.start)
      for _ in range(d.num_distractors):
        painter.grow(d.distractor_length, start_marker=False, end_marker=False)
      for _ in range(d.num_clutter):
        painter.grow(1, start_marker=False, end_marker=False)
    except _Stuck:
      continue
    break
  else:
    raise RuntimeError(f"Could not place all snakes of {spec} in {_IMAGE_TRIES} attempts: the "
                       f"settings are too dense for a {res}x{res} image.")
  if label == 1:
    markers, marked = np.stack([first.start, first.end]), (0, 0)
  else:
    markers, marked = np.stack([first.start, other.start if other_at_start else other.end]), (0, 1)
  masks = np.zeros((len(painter.snakes), res, res), bool)
  for i, snake in enumerate(painter.snakes):
    rows, cols = painter.image_coords(snake.pixels).T
    masks[i, rows, cols] = True
  image = np.where(masks.any(0), np.uint8(255), np.uint8(0))
  return image, label, {"markers": markers, "marked_paths": marked, "path_masks": masks}


# ---------------------------------------------------------------------------------------------
# Writing the official layout.


def num_in_batch(spec: GeneratorSpec, k: int) -> int:
  """Number of images in batch k (the last batch may be short)."""
  return min(spec.batch_size, spec.num_images - k * spec.batch_size)


def iter_batch(spec: GeneratorSpec, k: int) -> Iterator[tuple[np.ndarray, int]]:
  """Yields batch k's (image, label) pairs, sample_0 first: exactly what generate() writes."""
  if not 0 <= k < spec.num_batches:
    raise ValueError(f"Batch {k} out of range: {spec} has {spec.num_batches} batches.")
  # One stream per batch, so that any batch can be (re)generated alone and comes out identical.
  rng = np.random.default_rng([spec.seed, spec.resolution, spec.contour_length, k])
  for _ in range(num_in_batch(spec, k)):
    image, label, _ = render(spec, rng)
    yield image, label


def _write_batches(spec: GeneratorSpec, root: str, batches: list[int], progress: bool) -> None:
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
  _write_batches(spec, root, list(range(spec.num_batches)), progress)


def _missing_message(directory: str) -> str:
  return (f"Pathfinder files missing: no metadata/<k>.npy under {directory}. Generation is "
          f"disabled; set --config.data.generate=True to generate them, or point "
          f"--config.data.data_dir at an `lra_release` directory that contains "
          f"`{os.path.relpath(directory, os.path.dirname(os.path.dirname(directory)))}/`.")


def _metadata_files(directory: str) -> list[str]:
  """metadata/<k>.npy paths sorted by k numerically; FileNotFoundError when there are none."""
  meta_dir = os.path.join(directory, "metadata")
  names = os.listdir(meta_dir) if os.path.isdir(meta_dir) else []
  keyed = []
  for name in names:
    if name.startswith(".") or not name.endswith(".npy"):
      continue  # Temporary files of an interrupted generator, editor droppings.
    stem = name[:-len(".npy")]
    if not (stem.isascii() and stem.isdigit()):
      raise ValueError(f"{os.path.join(meta_dir, name)}: metadata files must be named <k>.npy "
                       f"with an integer k.")
    keyed.append((int(stem), os.path.join(meta_dir, name)))
  if not keyed:
    raise FileNotFoundError(_missing_message(directory))
  return [path for _, path in sorted(keyed)]


# Missing paths named in a refusal; the rest are counted.
_MAX_LISTED = 5


def check_data_dir(data_dir: str, resolution: int, difficulty: str) -> None:
  """A data_dir the user named is read, never written: an incomplete one is an error.

  Complete means metadata/<k>.npy for k = 0..K-1 without a gap, and every imgs/<k>/ directory they
  list. Single images may still be missing or empty: those are reported and skipped when loading.
  """
  directory = difficulty_path(data_dir, resolution, difficulty)
  paths = []
  if not os.path.isdir(data_dir):
    problem = "does not exist"
  else:
    try:
      paths = _metadata_files(directory)
    except FileNotFoundError:
      pass
    problem = f"has no {os.path.relpath(directory, data_dir)}/metadata/<k>.npy"
  if paths:
    present = {int(os.path.basename(p)[:-len(".npy")]) for p in paths}
    missing = [os.path.join(directory, "metadata", f"{k}.npy") for k in range(max(present) + 1)
               if k not in present]
    if not missing:
      image_dirs = {os.path.dirname(png) for p in paths for png, _ in _read_metadata(p, directory)}
      missing = sorted(d for d in image_dirs if not os.path.isdir(d))
    if not missing:
      return
    problem = "lacks " + ", ".join(os.path.relpath(p, data_dir) for p in missing[:_MAX_LISTED]) + (
        f" and {len(missing) - _MAX_LISTED} more" if len(missing) > _MAX_LISTED else "")
  raise FileNotFoundError(
      f"Pathfinder data_dir {data_dir} {problem}; expected "
      f"{os.path.join(directory, 'metadata', '<k>.npy')} for k = 0, 1, ... and the imgs/<k>/ "
      f"they list, as in lra_release. {DATA_DIR_HINT}.")


def ensure_files(root: str, resolution: int, difficulty: str, spec: GeneratorSpec | None) -> None:
  """Makes sure a difficulty's files exist under root; generates missing batches given a spec.

  root is written to (a batch being rewritten loses its imgs/<k>/): pass a cache directory, never
  a user's data_dir (see check_data_dir).
  """
  directory = difficulty_path(root, resolution, difficulty)
  if spec is None:
    _metadata_files(directory)
    return
  if (spec.resolution, spec.difficulty) != (resolution, difficulty_dir(difficulty)):
    raise ValueError(f"{spec} generates pathfinder{spec.resolution}/{spec.difficulty}, not "
                     f"pathfinder{resolution}/{difficulty_dir(difficulty)}.")
  missing = [k for k in range(spec.num_batches)
             if not os.path.isfile(os.path.join(directory, "metadata", f"{k}.npy"))]
  if not missing:
    return
  logging.info("Generating %d of %d Pathfinder batches with %s into %s", len(missing),
               spec.num_batches, spec, directory)
  _write_batches(spec, root, missing, progress=True)
  logging.info("Wrote %s", os.path.join(directory, "metadata"))


# ---------------------------------------------------------------------------------------------
# Reading.


def _read_metadata(path: str, directory: str) -> list[tuple[str, int]]:
  """Parses one metadata file into (png path, label) records, in line order."""
  records = []
  with open(path, "rb") as f:
    for lineno, raw in enumerate(f, start=1):
      try:
        line = raw.decode("utf-8")
      except UnicodeDecodeError as e:
        raise ValueError(f"{path}:{lineno}: not valid UTF-8 ({e}); metadata files are text "
                         f"despite their .npy suffix.") from None
      fields = line.split()
      if not fields:
        continue
      if len(fields) < 4:
        raise ValueError(f"{path}:{lineno}: expected at least 4 space-separated fields "
                         f"(`imgs/<k> sample_<i>.png <i> <label>`), got {len(fields)}: {line!r}.")
      if fields[3] not in ("0", "1"):
        raise ValueError(f"{path}:{lineno}: label (field 4) must be 0 or 1, got {fields[3]!r}.")
      if not fields[1].endswith(".png"):
        raise ValueError(f"{path}:{lineno}: field 2 must name a .png file, got {fields[1]!r}.")
      records.append((os.path.join(directory, fields[0], fields[1]), int(fields[3])))
  return records


def split_records(root: str, resolution: int, difficulty: str) -> dict[str, list[tuple[str, int]]]:
  """{split: [(png path, label)]}: all records in order, cut 80/10/10 (no image is opened)."""
  directory = difficulty_path(root, resolution, difficulty)
  records = []
  for path in _metadata_files(directory):
    records.extend(_read_metadata(path, directory))
  n = len(records)
  train_end, val_end = n * 8 // 10, n * 9 // 10
  return {"train": records[:train_end], "val": records[train_end:val_end],
          "test": records[val_end:]}


def read_images(records: list[tuple[str, int]], resolution: int, progress: bool = False
                ) -> tuple[np.ndarray, np.ndarray, list[tuple[str, str]]]:
  """Reads records into (uint8 [N, res*res] pixels, int32 [N] labels, skipped (path, reason)).

  Missing, empty, unreadable and wrongly sized images are skipped, never fed: the release has one
  empty PNG (pathfinder32/curv_baseline/imgs/0/sample_172.png).
  """
  pixels = np.empty((len(records), resolution * resolution), np.uint8)
  labels = np.empty(len(records), np.int32)
  skipped = []
  n = 0
  for path, label in tqdm.tqdm(records, desc="Reading Pathfinder", unit="img", file=sys.stderr,
                               disable=not progress):
    try:
      if os.path.getsize(path) == 0:
        skipped.append((path, "empty: 0-byte file"))
        continue
      with Image.open(path) as image:
        array = np.asarray(image.convert("L"))
    except FileNotFoundError:
      skipped.append((path, "missing: no such file"))
      continue
    # PIL.UnidentifiedImageError and truncated files are OSErrors; some corrupt chunks surface as
    # SyntaxError or ValueError from the decoders.
    except (OSError, SyntaxError, ValueError) as e:
      skipped.append((path, f"unreadable: {e}"))
      continue
    if array.shape != (resolution, resolution):
      skipped.append((path, f"wrong shape: {array.shape}, expected {(resolution, resolution)}"))
      continue
    pixels[n] = array.ravel()
    labels[n] = label
    n += 1
  return pixels[:n], labels[:n], skipped


def load_split(root: str, resolution: int, difficulty: str, split: str) -> dict[str, np.ndarray]:
  """Loads a split as {"pixels": uint8 [N, res*res] row-major, "labels": int32 [N]}."""
  if split not in SPLITS:
    raise ValueError(f"Unknown Pathfinder split {split!r}; expected one of {SPLITS}.")
  every_split = split_records(root, resolution, difficulty)
  records = every_split[split]
  directory = difficulty_path(root, resolution, difficulty)
  if not records:
    # An empty split would train or evaluate on nothing, and fail far from here.
    raise ValueError(f"no images in the {split} split of {directory}: the metadata lists "
                     f"{sum(map(len, every_split.values()))} in all, too few to cut 80/10/10.")
  pixels, labels, skipped = read_images(records, resolution, progress=len(records) > 10_000)
  for path, reason in skipped[:_MAX_LOGGED_SKIPS]:
    logging.warning("Pathfinder: skipping %s: %s", path, reason)
  if skipped:
    kinds = {}
    for _, reason in skipped:
      kind = reason.split(":")[0]
      kinds[kind] = kinds.get(kind, 0) + 1
    counts = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
    logging.warning(
        "Pathfinder%d %s %s: skipped %d of %d images (%s)%s", resolution,
        difficulty_dir(difficulty), split, len(skipped), len(records), counts,
        f"; only the first {_MAX_LOGGED_SKIPS} are listed" if len(skipped) > _MAX_LOGGED_SKIPS
        else "")
    if not len(labels):
      raise ValueError(f"no readable images in the {split} split of {directory}: {len(skipped)} of "
                       f"{len(records)} empty or unreadable ({counts}).")
  return {"pixels": pixels, "labels": labels}
