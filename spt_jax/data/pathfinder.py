"""Pathfinder (LRA): the official file layout, its loader, and the check of a user's copy.

Layout of the LRA release (`lra_release/`), read and written as it is:

  <root>/pathfinder{32,64,128,256}/{curv_baseline,curv_contour_length_9,curv_contour_length_14}/
      imgs/<k>/sample_<i>.png   grayscale res x res PNGs
      metadata/<k>.npy          despite the suffix, TEXT: one line per image,
                                `imgs/<k> sample_<i>.png <i> <label> [more fields]`

LRA splits each difficulty 80/10/10 into train/val/test; here the split is deterministic: all
metadata records in order (k numerically, then line order), first 80% train, next 10% val, last
10% test. Splits are cut on metadata records, before any image is opened, so an unreadable image
never shifts other images between splits.

The generator (pathfinder_generator.py) writes the same layout into the cache directory when no
`data_dir` is given; `check_files` checks a user's copy of the release as the loader reads it.
"""
from __future__ import annotations

import collections
import os
import sys

from absl import logging
import ml_collections
import numpy as np
from PIL import Image
import tqdm

from spt_jax.data import DATA_DIR_HINT, checks
from spt_jax.data.base import (LRA_SMOKE_MODEL, Task, TaskData, as_representation, data_root,
                               lra_smoke_phase, pixel_kind, pixel_norm)
# Re-exported: code that reaches Pathfinder through this module (tests, notebooks, scripts written
# against it) finds the layout's names and the generator here too.
from spt_jax.data.pathfinder_generator import (  # noqa: F401  pylint: disable=unused-import
    CONTOUR_LENGTH, DIFFICULTIES, RESOLUTIONS, Drawing, GeneratorSpec, _stencils, difficulty_dir,
    difficulty_path, generate, iter_batch, iter_batch_info, num_in_batch, render, write_batches)
from spt_jax.data.vocab import BYTE_VOCAB

SPLITS = ("train", "val", "test")
# Individual skipped images logged per load; the rest only count in the summary line.
_MAX_LOGGED_SKIPS = 20
# Records a check reads (decodes) per chunk: bounds the pixels held at once.
_IMAGE_CHUNK = 4096


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
  write_batches(spec, root, missing, progress=True)
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


# ---------------------------------------------------------------------------------------- Task
def data_config(resolution: int = 32, **overrides) -> ml_collections.ConfigDict:
  """Pathfinder (resolution 32) or Path-X (128): official files if `data_dir` (only read: an
  incomplete one is an error), else generated into `cache_dir` (if `generate`)."""
  c = ml_collections.ConfigDict(dict(
      task="pathfinder", data_dir="", cache_dir="~/.cache/spt_jax", generate=True,
      resolution=resolution, difficulty="hard", representation="pixels",
      max_length=resolution * resolution,
      downsample=1,  # > 1: each image shrunk by this factor (block means), e.g. 32x32 → 16x16
      pixel_mean=127.5, pixel_std=127.5,  # (x / 255 - 0.5) / 0.5, as Amos et al.
      generator=ml_collections.ConfigDict(dict(num_images=200_000, seed=0))))
  c.update(overrides)
  return c


def downsample(pixels: np.ndarray, resolution: int, factor: int) -> np.ndarray:
  """[N, res*res] 8-bit images → [N, (res/factor)²]: the mean of each factor x factor block, rounded
  (a smaller image of the same scene, not one drawn at the smaller size)."""
  if factor < 1 or resolution % factor:
    raise ValueError(f"config.data.downsample={factor} must be a positive divisor of the "
                     f"resolution {resolution}.")
  side = resolution // factor
  blocks = pixels.reshape(-1, side, factor, side, factor).astype(np.float32).mean(axis=(2, 4))
  return np.rint(blocks).astype(np.uint8).reshape(len(pixels), side * side)


def load(cfg) -> TaskData:
  res, difficulty = cfg.resolution, cfg.difficulty
  spec = GeneratorSpec(resolution=res,
                       contour_length=CONTOUR_LENGTH[DIFFICULTIES.get(difficulty, difficulty)],
                       num_images=cfg.generator.num_images, seed=cfg.generator.seed)
  root = data_root(cfg, spec)
  if cfg.data_dir:
    check_data_dir(root, res, difficulty)
  else:
    ensure_files(root, res, difficulty, spec if cfg.generate else None)
  splits = {s: load_split(root, res, difficulty, s) for s in SPLITS}
  factor = cfg.get("downsample", 1)
  if factor > 1:
    splits = {s: dict(a, pixels=downsample(a["pixels"], res, factor)) for s, a in splits.items()}
  side = res // factor
  return TaskData(f"pathfinder{res}" + (f"_to{side}" if factor > 1 else ""), BYTE_VOCAB, 2,
                  side * side, as_representation(splits, cfg.representation), root,
                  input_kind=pixel_kind(cfg), generated=not cfg.data_dir, **pixel_norm(cfg))


def signature(cfg) -> dict:
  return {"task": "pathfinder", "input_kind": pixel_kind(cfg), "vocab": BYTE_VOCAB.tokens,
          "max_length": (cfg.resolution // cfg.get("downsample", 1)) ** 2}


def smoke(cfg) -> dict:
  pathx = cfg.resolution >= 128
  # Path-X: local attention windows of 3×256 keep the smoke run's 16k-token scores small (3×1024:
  # 0.8 GB).
  model = dict(LRA_SMOKE_MODEL, **(dict(attention_block_size=256) if pathx else {}))
  # Both are step- or compile-bound on 2 cores (1k, 16k tokens): the fewest steps and eval batches
  # that still exercise warmup, logging and evaluation keep them under a minute beside a second
  # test worker on a slow host.
  return {"data": dict(generator=dict(num_images=16 if pathx else 300, seed=0)), "model": model,
          "phase": lra_smoke_phase(4, 2, max_eval_batches=1) if pathx else lra_smoke_phase(10)}


# ---------------------------------------------------------------------------------------- Check
def _metadata_consistency(report: checks.Report, directory: str, meta_paths: list[str]) -> list:
  """(png path, label, where) of every metadata line, with the loader's parser; duplicate images
  and lines whose fields disagree (image directory vs metadata file, index vs file name) reported."""
  records, seen, duplicates, mismatched = [], {}, [], []
  for meta in meta_paths:
    k = os.path.basename(meta)[:-len(".npy")]
    parsed = _read_metadata(meta, directory)
    with open(meta, "rb") as f:
      lines = [(n, raw.decode("utf-8").split()) for n, raw in enumerate(f, start=1)]
    for (lineno, fields), (png, label) in zip([(n, fs) for n, fs in lines if fs], parsed):
      where = f"{os.path.relpath(meta, directory)}:{lineno}"
      if png in seen:
        duplicates.append(f"{where} (also {seen[png]})")
      seen.setdefault(png, where)
      if fields[0] != f"imgs/{k}" or fields[1] != f"sample_{fields[2]}.png":
        mismatched.append(where)
      records.append((png, label, where))
  if duplicates:
    report.add(checks.DEFECT, f"{len(duplicates)} metadata line(s) list an image listed before "
                              f"(the loader reads it twice): {checks.listed(duplicates)}.")
  if mismatched:
    report.add(checks.NOTE, f"{len(mismatched)} metadata line(s) are not `imgs/<k> sample_<i>.png "
                            f"<i>` for their metadata/<k>.npy (the loader only reads fields 1, 2 "
                            f"and 4): {checks.listed(mismatched)}.")
  return records


def _image_problems(records, resolution: int, images: str) -> dict[str, list[tuple[str, str]]]:
  """{kind: [(png path, where and why)]} for the images the loader would skip, with the loader's
  own reading and reasons (empty, missing, unreadable, wrong shape)."""
  problems = collections.defaultdict(list)
  bar = tqdm.tqdm(total=len(records), desc="Checking images", unit="img", file=sys.stderr,
                  disable=len(records) < 20_000)
  for begin in range(0, len(records), _IMAGE_CHUNK):
    chunk = records[begin:begin + _IMAGE_CHUNK]
    where = {p: w for p, _, w in chunk}
    if images == "decode":
      _, _, skipped = read_images([(p, label) for p, label, _ in chunk], resolution)
    else:
      skipped = []
      for path, _, _ in chunk:
        try:
          if os.path.getsize(path) == 0:
            skipped.append((path, "empty: 0-byte file"))
        except FileNotFoundError:
          skipped.append((path, "missing: no such file"))
    for path, reason in skipped:
      kind, _, detail = reason.partition(": ")
      problems[kind].append((path, f"{where[path]}: {detail}"))
    bar.update(len(chunk))
  bar.close()
  return problems


def _orphans(directory: str, records) -> list[str]:
  """Images under imgs/ that no metadata line lists."""
  listed = {p for p, _, _ in records}
  imgs = os.path.join(directory, "imgs")
  found = []
  for entry in sorted(os.scandir(imgs), key=lambda e: e.name) if os.path.isdir(imgs) else []:
    if entry.is_dir() and not entry.name.startswith("."):
      found += [os.path.join(entry.path, n) for n in sorted(os.listdir(entry.path))
                if n.endswith(".png") and os.path.join(entry.path, n) not in listed]
  return found


def _check_difficulty(report: checks.Report, root: str, resolution: int, name: str,
                      images: str) -> bool:
  """Checks one difficulty directory; whether the loader would read it."""
  directory = difficulty_path(root, resolution, name)
  errors = report.count(checks.ERROR)
  try:
    check_data_dir(root, resolution, name)
    meta_paths = _metadata_files(directory)
    records = _metadata_consistency(report, directory, meta_paths)
  except (FileNotFoundError, ValueError) as e:
    report.add(checks.ERROR, str(e))
    return False
  if not records:
    report.add(checks.ERROR, f"{directory}/metadata: no records in {len(meta_paths)} metadata "
                             f"file(s).")
    return False
  problems = _image_problems(records, resolution, images)
  skipped = {path for found in problems.values() for path, _ in found}
  for kind, found in sorted(problems.items()):
    report.add(checks.DEFECT, f"{len(found)} {kind} image(s) in {name} (the loader skips them): "
                              f"{checks.listed([f'{path} ({why})' for path, why in found])}.")
  orphans = _orphans(directory, records)
  if orphans:
    report.add(checks.DEFECT, f"{len(orphans)} image(s) under {directory}/imgs that no metadata "
                              f"line lists (an incomplete metadata file?): "
                              f"{checks.listed(orphans)}.")
  n = len(records)
  cuts = {"train": (0, n * 8 // 10), "val": (n * 8 // 10, n * 9 // 10), "test": (n * 9 // 10, n)}
  usable = {s: sum(1 for p, _, _ in records[a:b] if p not in skipped) for s, (a, b) in cuts.items()}
  for split, count in usable.items():
    if not count:
      report.add(checks.ERROR, f"{directory}: the {split} split (records {cuts[split][0]}..."
                               f"{cuts[split][1] - 1} of {n}) has no readable image.")
  summary = ", ".join(f"{s} {c:,}" for s, c in usable.items())
  counts = ", ".join(f"{len(p)} {k}" for k, p in sorted(problems.items())) or "none"
  checked = "decoded" if images == "decode" else "present and non-empty (not decoded)"
  report.add(checks.OK if report.count(checks.ERROR) == errors else checks.NOTE,
             f"{directory}: {n:,} images listed in {len(meta_paths)} metadata file(s), {checked}; "
             f"skipped: {counts}; readable per split: {summary}")
  return report.count(checks.ERROR) == errors


def check_files(data_dir: str, *, resolution: int | None = None, difficulty: str | None = None,
                images: str = "decode", **_) -> checks.Report:
  """The release's Pathfinder files at `resolution` (default: the task's) under data_dir: every
  metadata line against its image, for `difficulty` or every one present. images='decode' reads
  each image as the loader does; 'stat' only checks that it is there and not empty."""
  resolution = resolution or data_config().resolution
  name = f"pathfinder{resolution}"
  report = checks.Report(f"Pathfinder {resolution}x{resolution} (LRA release) under {data_dir}")
  root = checks.locate(report, data_dir, name, f"lra_release/{name}/")
  if root is None:
    return report
  base = os.path.join(root, name)
  present = sorted(e.name for e in os.scandir(base) if e.is_dir() and not e.name.startswith("."))
  by_dir = {d: k for k, d in DIFFICULTIES.items()}
  for other in present:
    if other not in CONTOUR_LENGTH:
      report.add(checks.NOTE, f"{os.path.join(base, other)}: not a difficulty the loader reads (it "
                              f"reads " + ", ".join(f"{d} = {by_dir[d]}" for d in CONTOUR_LENGTH)
                 + ").")
  if difficulty:
    wanted = [difficulty_dir(difficulty)]
  else:
    wanted = [d for d in CONTOUR_LENGTH if d in present]
    if not wanted:
      report.add(checks.ERROR, f"{base}: none of {', '.join(CONTOUR_LENGTH)} is there.")
      return report
    for d in CONTOUR_LENGTH:
      if d not in present:
        report.add(checks.NOTE, f"{os.path.join(base, d)} ({by_dir[d]}): absent.")
  readable = [d for d in wanted if _check_difficulty(report, root, resolution, d, images)]
  report.flags = [checks.flag("data_dir", os.path.abspath(root))]
  default = difficulty_dir(data_config(resolution).difficulty)
  if readable and default not in readable:
    report.flags.append(checks.flag("difficulty", by_dir[readable[-1]]))
  return report


# Path-X is LRA's name for Pathfinder at 128x128.
TASK = Task("pathfinder", data_config, load, signature, smoke, check=check_files,
            variants={"pathx": {"resolution": 128}})
