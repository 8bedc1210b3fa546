"""CIFAR-10 (LRA "Image"): grayscale 32x32 images from TFDS `cifar10` as 1024-pixel sequences.

Splits follow LRA: `train` is TFDS `train[:90%]`, `val` is `train[90%:]`, `test` is `test`. The cut
is computed as TFDS computes it (`round(90 * n / 100)`, its default "closest" rounding: 45,000 of
50,000) and taken by index from the data source of the whole `train` split, in TFDS's record order,
so the slices are the ones `tfds.load(split="train[:90%]")` gives.

Pixels are LRA's `tf.image.rgb_to_grayscale` values (see `rgb_to_grayscale`), flattened row-major.
Every value 0..255 is a real pixel, black included: there is no padding in this task.
"""
from __future__ import annotations

from absl import logging
import ml_collections
import numpy as np

from spt_jax.data import text
from spt_jax.data.base import (LRA_SMOKE_MODEL, Task, TaskData, as_representation,
                               lra_smoke_phase, pixel_kind, pixel_norm)
from spt_jax.data.vocab import BYTE_VOCAB

TFDS_NAME = "cifar10"
SPLITS = ("train", "val", "test")
IMAGE_SHAPE = (32, 32, 3)
NUM_PIXELS = IMAGE_SHAPE[0] * IMAGE_SHAPE[1]
NUM_CLASSES = 10
TRAIN_PERCENT = 90

# tf.image.rgb_to_grayscale's luma weights, used in float32 as TF uses them.
_RGB_WEIGHTS = np.array([0.2989, 0.5870, 0.1140], np.float32)


def rgb_to_grayscale(images: np.ndarray) -> np.ndarray:
  """tf.image.rgb_to_grayscale on uint8 [..., 3]: uint8 [...].

  TF converts to float32 in [0, 1] (x * (1/255)), takes the weighted sum, then converts back with
  `convert_image_dtype`, which multiplies by 255.5 and casts, i.e. truncates: gray =
  floor(255.5 * luma / 255) in float32, not round(luma). (Rounding would differ by one level on a
  quarter of all colours.) The sum here is taken in channel order without fused multiply-adds;
  another float32 order moves at most ~30 of the 2**24 colours by one level.
  """
  images = np.asarray(images)
  if images.dtype != np.uint8 or images.shape[-1:] != (3,):
    raise ValueError(f"Expected uint8 RGB images [..., 3], got {images.dtype} {images.shape}.")
  x = images.astype(np.float32) * np.float32(1.0 / 255.0)
  gray = x[..., 0] * _RGB_WEIGHTS[0] + x[..., 1] * _RGB_WEIGHTS[1] + x[..., 2] * _RGB_WEIGHTS[2]
  # The weights sum to 0.9999, so the product stays below 256 and the cast cannot wrap.
  return (gray * np.float32(255.5)).astype(np.uint8)


def split_range(split: str, num_train: int) -> range:
  """Indices into TFDS `train` for train/val (TFDS's percent-slice arithmetic)."""
  cut = int(round(TRAIN_PERCENT * num_train / 100.0))
  if split == "train":
    return range(0, cut)
  if split == "val":
    return range(cut, num_train)
  raise ValueError(f"split_range covers train and val, not {split!r}.")


def load_split(split: str, data_dir: str | None = None) -> dict[str, np.ndarray]:
  """{"pixels": uint8 [N, 1024] grayscale, "labels": int32 [N]}."""
  if split not in SPLITS:
    raise ValueError(f"Unknown CIFAR-10 split {split!r}; expected one of {SPLITS}.")
  tfds_split = "test" if split == "test" else "train"
  source = text.open_tfds_split(TFDS_NAME, tfds_split, data_dir)
  indices = range(len(source)) if split == "test" else split_range(split, len(source))
  pixels = np.empty((len(indices), NUM_PIXELS), np.uint8)
  labels = np.empty(len(indices), np.int32)
  for row, index in enumerate(indices):
    example = source[index]
    image = np.asarray(example["image"])
    if image.shape != IMAGE_SHAPE:
      raise ValueError(f"CIFAR-10 {tfds_split}[{index}]: image shape {image.shape}, expected "
                       f"{IMAGE_SHAPE}.")
    pixels[row] = rgb_to_grayscale(image).reshape(NUM_PIXELS)
    labels[row] = example["label"]
  if len(labels) and not (labels.min() >= 0 and labels.max() < NUM_CLASSES):
    raise ValueError(f"CIFAR-10 {split}: labels outside 0..{NUM_CLASSES - 1}.")
  logging.info("CIFAR-10 %s: %d images from TFDS %s[%d:%d]", split, len(labels), tfds_split,
               indices.start, indices.stop)
  return {"pixels": pixels, "labels": labels}


# ---------------------------------------------------------------------------------------- Task
def data_config(**overrides) -> ml_collections.ConfigDict:
  """CIFAR-10 from TFDS, grayscale, 1024 pixels; 'pixels' (continuous) or 'tokens' (LRA)."""
  c = ml_collections.ConfigDict(dict(task="image", data_dir="", representation="pixels",
                                     max_length=NUM_PIXELS,
                                     # Pixels enter as (x - mean) / std: Amos et al.'s statistics
                                     # of grayscale CIFAR-10 (docs/configs.md#image).
                                     pixel_mean=122.6, pixel_std=61.0))
  c.update(overrides)
  return c


def load(cfg) -> TaskData:
  splits = {s: load_split(s, cfg.data_dir or None) for s in SPLITS}
  return TaskData("image", BYTE_VOCAB, NUM_CLASSES, NUM_PIXELS,
                  as_representation(splits, cfg.representation),
                  f"tfds {TFDS_NAME} ({cfg.data_dir or 'default data_dir'})",
                  input_kind=pixel_kind(cfg), **pixel_norm(cfg))


def signature(cfg) -> dict:
  return {"task": "image", "input_kind": pixel_kind(cfg), "vocab": BYTE_VOCAB.tokens,
          "max_length": NUM_PIXELS}


def smoke(cfg) -> dict:
  return {"data": dict(), "model": LRA_SMOKE_MODEL, "phase": lra_smoke_phase()}


TFDS = text.TfdsDataset(
    title="Image", name=TFDS_NAME, host=("www.cs.toronto.edu", 443),
    full_sizes={"train": 50_000, "test": 10_000},
    splits={"train": ("train", f"TFDS train[:{TRAIN_PERCENT}%]"),
            "val": ("train", f"the last {100 - TRAIN_PERCENT}% of TFDS train (LRA)"),
            "test": ("test", "TFDS test")},
    load_split=lambda split, data_dir: load_split(split, data_dir=data_dir),
    num_classes=NUM_CLASSES)

TASK = Task("image", data_config, load, signature, smoke, check=TFDS.check)
