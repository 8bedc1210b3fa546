"""From `config.data` to arrays: one entry per task, all returning the same `TaskData`."""
from __future__ import annotations

import dataclasses
import os

import numpy as np
from absl import logging

from spt_jax.data import image, listops, pathfinder, retrieval, synthetic, text
from spt_jax.data.vocab import BYTE_VOCAB, NUM_SPECIAL, Vocabulary


@dataclasses.dataclass
class TaskData:
  name: str
  vocab: Vocabulary
  num_classes: int
  max_length: int
  splits: dict[str, dict[str, np.ndarray]]  # {"train"|"val"|"test": {"inputs", "labels"}}
  source: str  # where the data came from, for the logs and results
  input_kind: str = "tokens"  # 'tokens' (ids [N, L] or pairs [N, 2, L]) or 'pixels' (uint8 [N, L])
  # Pixel inputs enter the model as (pixel - pixel_mean) / pixel_std (8-bit units).
  pixel_mean: float = 0.0
  pixel_std: float = 255.0
  generated: bool = False  # made by spt_jax's generator, not read from an official release


def _data_root(cfg, spec) -> str:
  """The user's data_dir, read as it is, or the cache directory generated data lives in.

  A user's directory is never written to: generating there could replace their files, and a
  mistyped path would silently train on generated data. The cache directory is named after every
  generator setting, so variants never collide.
  """
  if cfg.data_dir:
    return os.path.expanduser(cfg.data_dir)
  return os.path.join(os.path.expanduser(cfg.cache_dir), spec.cache_name())


def _listops(cfg) -> TaskData:
  gen = cfg.generator
  spec = listops.GeneratorSpec(
      num_train=gen.num_train, num_val=gen.num_val, num_test=gen.num_test,
      min_length=gen.min_length, max_length=gen.max_length, max_depth=gen.max_depth,
      max_args=gen.max_args, seed=gen.seed)
  if gen.max_length > cfg.max_length + 1:
    raise ValueError(f"config.data.generator.max_length={gen.max_length} produces sequences longer "
                     f"than config.data.max_length={cfg.max_length}.")
  root = _data_root(cfg, spec)
  if cfg.data_dir:
    listops.check_data_dir(root)
  else:
    listops.ensure_files(root, spec if cfg.generate else None)
  splits = {s: listops.load_split(root, s, cfg.max_length) for s in listops.SPLITS}
  for s, arrays in splits.items():
    logging.info("ListOps %s: %d examples from %s", s, len(arrays["labels"]),
                 listops.split_path(root, s))
  return TaskData("listops", listops.VOCAB, 10, cfg.max_length, splits, root,
                  generated=not cfg.data_dir)


def _synthetic(cfg) -> TaskData:
  spec = synthetic.Spec(**cfg.synthetic.to_dict())
  if spec.length > cfg.max_length:
    raise ValueError(f"config.data.synthetic.length={spec.length} exceeds config.data.max_length="
                     f"{cfg.max_length}.")
  return TaskData("synthetic", spec.vocab, 2, cfg.max_length, synthetic.load_splits(spec),
                  f"synthetic {spec}")


def _text(cfg) -> TaskData:
  splits = {s: text.load_split(s, cfg.max_length, cfg.data_dir or None) for s in ("train", "val", "test")}
  return TaskData("text", BYTE_VOCAB, 2, cfg.max_length, splits,
                  f"tfds imdb_reviews ({cfg.data_dir or 'default data_dir'})")


def _retrieval(cfg) -> TaskData:
  if not cfg.data_dir:
    raise FileNotFoundError("config.data.data_dir must point at the LRA release directory holding "
                            "tsv_data/new_aan_pairs.{train,eval,test}.tsv (no download exists).")
  splits = {s: retrieval.load_split(cfg.data_dir, s, cfg.max_length)
            for s in ("train", "val", "test")}
  return TaskData("retrieval", BYTE_VOCAB, 2, cfg.max_length, splits,
                  retrieval.split_path(cfg.data_dir, "train"))


PIXEL_REPRESENTATIONS = ("pixels", "tokens")


def _as_representation(splits, representation: str):
  """Raw 8-bit pixels → continuous inputs (kept as uint8) or LRA's 256 pixel tokens (id 3 + value)."""
  if representation not in PIXEL_REPRESENTATIONS:
    raise ValueError(f"config.data.representation={representation!r} must be one of "
                     f"{PIXEL_REPRESENTATIONS}.")
  out = {}
  for name, arrays in splits.items():
    pixels = arrays["pixels"]
    inputs = pixels if representation == "pixels" else pixels.astype(np.uint16) + NUM_SPECIAL
    out[name] = {"inputs": inputs, "labels": arrays["labels"]}
  return out


def _pixel_norm(cfg) -> dict:
  if not cfg.pixel_std > 0:
    raise ValueError(f"config.data.pixel_std={cfg.pixel_std} must be > 0.")
  return dict(pixel_mean=float(cfg.pixel_mean), pixel_std=float(cfg.pixel_std))


def _image(cfg) -> TaskData:
  splits = {s: image.load_split(s, cfg.data_dir or None) for s in image.SPLITS}
  return TaskData("image", BYTE_VOCAB, image.NUM_CLASSES, image.NUM_PIXELS,
                  _as_representation(splits, cfg.representation),
                  f"tfds cifar10 ({cfg.data_dir or 'default data_dir'})",
                  input_kind="pixels" if cfg.representation == "pixels" else "tokens",
                  **_pixel_norm(cfg))


def downsample(pixels: np.ndarray, resolution: int, factor: int) -> np.ndarray:
  """[N, res*res] 8-bit images → [N, (res/factor)²]: the mean of each factor x factor block, rounded
  (a smaller image of the same scene, not one drawn at the smaller size)."""
  if factor < 1 or resolution % factor:
    raise ValueError(f"config.data.downsample={factor} must be a positive divisor of the "
                     f"resolution {resolution}.")
  side = resolution // factor
  blocks = pixels.reshape(-1, side, factor, side, factor).astype(np.float32).mean(axis=(2, 4))
  return np.rint(blocks).astype(np.uint8).reshape(len(pixels), side * side)


def _pathfinder(cfg) -> TaskData:
  res, difficulty = cfg.resolution, cfg.difficulty
  gen = cfg.generator
  spec = pathfinder.GeneratorSpec(resolution=res,
                                  contour_length=pathfinder.CONTOUR_LENGTH[
                                      pathfinder.DIFFICULTIES.get(difficulty, difficulty)],
                                  num_images=gen.num_images, seed=gen.seed)
  root = _data_root(cfg, spec)
  if cfg.data_dir:
    pathfinder.check_data_dir(root, res, difficulty)
  else:
    pathfinder.ensure_files(root, res, difficulty, spec if cfg.generate else None)
  splits = {s: pathfinder.load_split(root, res, difficulty, s) for s in ("train", "val", "test")}
  factor = cfg.get("downsample", 1)
  if factor > 1:
    splits = {s: dict(a, pixels=downsample(a["pixels"], res, factor)) for s, a in splits.items()}
  side = res // factor
  return TaskData(f"pathfinder{res}" + (f"_to{side}" if factor > 1 else ""), BYTE_VOCAB, 2,
                  side * side, _as_representation(splits, cfg.representation), root,
                  input_kind="pixels" if cfg.representation == "pixels" else "tokens",
                  generated=not cfg.data_dir, **_pixel_norm(cfg))


TASKS = {"listops": _listops, "synthetic": _synthetic, "text": _text, "retrieval": _retrieval,
         "image": _image, "pathfinder": _pathfinder}


def signature(cfg) -> dict:
  """What a model trained on this data fixes, computed from the config alone (no data loaded):
  the input kind and the vocabulary. Pretraining and fine-tuning data must agree on it."""
  if cfg.task == "listops":
    vocab = listops.VOCAB
  elif cfg.task == "synthetic":
    vocab = synthetic.vocabulary(cfg.synthetic.num_background)
  else:
    vocab = BYTE_VOCAB
  kind = cfg.get("representation", "tokens") if cfg.task in ("image", "pathfinder") else "tokens"
  length = (image.NUM_PIXELS if cfg.task == "image" else
            (cfg.resolution // cfg.get("downsample", 1)) ** 2 if cfg.task == "pathfinder"
            else cfg.max_length)
  return {"task": cfg.task, "input_kind": kind, "vocab": vocab.tokens, "max_length": length}


def load(data_config) -> TaskData:
  if data_config.task not in TASKS:
    raise ValueError(f"config.data.task={data_config.task!r} must be one of {sorted(TASKS)}.")
  task = TASKS[data_config.task](data_config)
  for split, arrays in task.splits.items():  # Training or evaluating on nothing is never meant.
    if not len(arrays["labels"]):
      raise ValueError(f"The {split} split of {data_config.task} data ({task.source}) has no "
                       f"examples.")
  return task
