r"""Prepare and verify a task's data: `python -m spt_jax.data.prepare --task=TASK --data_dir=DIR`.

  python -m spt_jax.data.prepare --task=listops --data_dir=~/lra_release
  python -m spt_jax.data.prepare --task=pathfinder --data_dir=~/lra_release --difficulty=hard
  python -m spt_jax.data.prepare --task=text --data_dir=~/tensorflow_datasets

LRA release tasks (listops, retrieval, pathfinder, pathx): DIR is an unpacked `lra_release` or any
directory above the task's files; the task's directory is found wherever it sits (up to
`_MAX_DEPTH` levels down: `lra_release/listops-1000`, `lra_release/lra_release/tsv_data`, ...). Every
file the loader reads is checked with the loader's own parsers: present, header or no header as the
loader expects, every row parsed, rows counted; for Pathfinder, every metadata line against its
image (present, non-empty, decodable at the resolution; `--images=stat` checks presence and size
only), unreadable or empty images counted per difficulty, and the 80/10/10 splits the loader cuts.

TFDS tasks (text, image): DIR is a TFDS data_dir (default layout `~/tensorflow_datasets`). A prepared
dataset, in TFRecord (`tfds build`'s default) or array_record, is read whole through the loader,
every TFRecord CRC checked. A missing one is built with `tfds build` where that can work (TensorFlow
installed and the download host reachable); otherwise the one command to run on a machine with
network is printed.

The report ends with the exact `--config.data.data_dir=...` to pass. Exit status: 0 the data is
complete; 1 the loader would refuse it (each reason named with its file, and line where there is
one); 2 the loader reads it but skips or tolerates something (an empty or missing image, a last
line without its newline, ...), each named by path.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import importlib.util
import os
import shlex
import socket
import sys

import numpy as np
import tqdm

from spt_jax.data import image, listops, pathfinder, retrieval, text, tfrecord
from spt_jax.data.vocab import PAD_ID

ERROR, DEFECT, OK, NOTE = "ERROR", "DEFECT", "ok", "note"
EXIT = {OK: 0, ERROR: 1, DEFECT: 2}
# How far below DIR a task's directory is looked for.
_MAX_DEPTH = 3
# Directories never searched through: the task directories themselves and Pathfinder's image trees.
_NO_DESCENT = frozenset(("imgs", "metadata", listops.SUBDIR, retrieval.SUBDIR))
# Paths of one kind of problem named in the report; the rest are counted.
_MAX_LISTED = 5
# Pathfinder records read (decoded) per chunk: bounds the pixels held at once.
_IMAGE_CHUNK = 4096
# Examples per split of the published data (a different count is reported, not refused).
LISTOPS_RELEASE = {"train": 96_000, "val": 2_000, "test": 2_000}  # LRA's generator defaults
TFDS_FULL = {"imdb_reviews": {"train": 25_000, "test": 25_000},
             "cifar10": {"train": 50_000, "test": 10_000}}
# Where the TFDS builders download from: probed before `tfds build` is tried.
TFDS_HOSTS = {"imdb_reviews": ("ai.stanford.edu", 80), "cifar10": ("www.cs.toronto.edu", 443)}
TASKS = ("listops", "retrieval", "pathfinder", "pathx", "text", "image")


@dataclasses.dataclass
class Report:
  """Findings in order, each (level, text), and the config flags that read the data."""
  title: str
  findings: list = dataclasses.field(default_factory=list)
  flags: list = dataclasses.field(default_factory=list)

  def add(self, level: str, message: str) -> None:
    self.findings.append((level, message))

  def count(self, level: str) -> int:
    return sum(1 for lv, _ in self.findings if lv == level)

  @property
  def exit_code(self) -> int:
    if self.count(ERROR):
      return EXIT[ERROR]
    return EXIT[DEFECT] if self.count(DEFECT) else EXIT[OK]

  def render(self) -> str:
    lines = [self.title]
    lines += [f"  {level:<6}  {message}" for level, message in self.findings]
    errors, defects = self.count(ERROR), self.count(DEFECT)
    if errors:
      lines.append(f"REFUSED: {errors} error(s) above; the loader would not run on this data.")
    else:
      verdict = (f"USABLE with {defects} defect(s) above, which the loader skips or tolerates"
                 if defects else "OK: complete")
      lines.append(f"{verdict}. Pass:")
      lines.append("  " + " ".join(self.flags))
    return "\n".join(lines)


def _flag(key: str, value) -> str:
  return f"--config.data.{key}={shlex.quote(str(value))}"


# ------------------------------------------------------------------------------ finding the data
def find_dirs(data_dir: str, child: str, max_depth: int = _MAX_DEPTH) -> list[str]:
  """Directories at most max_depth levels below data_dir (itself included) that hold `child`/."""
  found, frontier = [], [(data_dir, 0)]
  while frontier:
    directory, depth = frontier.pop(0)
    try:
      entries = sorted((e for e in os.scandir(directory) if e.is_dir()), key=lambda e: e.name)
    except OSError:
      continue
    names = {e.name for e in entries}
    if child in names:
      found.append(directory)
    if depth < max_depth:
      frontier += [(e.path, depth + 1) for e in entries
                   if not e.name.startswith(".") and e.name not in _NO_DESCENT
                   and not e.name.startswith("pathfinder") and e.name != child]
  return found


def _locate(report: Report, data_dir: str, child: str, release_path: str) -> str | None:
  """The one directory holding `child`/ (under data_dir, or above it when data_dir is that child
  or inside it), or None with an error in the report."""
  parts = os.path.abspath(data_dir).split(os.sep)
  if child in parts:  # data_dir is the task's directory itself, or inside it.
    roots = [os.sep.join(parts[:len(parts) - 1 - parts[::-1].index(child)]) or os.sep]
  else:
    roots = find_dirs(data_dir, child)
  if not roots:
    report.add(ERROR, f"{data_dir}: no {child}/ directory in it or up to {_MAX_DEPTH} levels down "
                      f"(the release unpacks to {release_path}).")
    return None
  if len(roots) > 1:
    report.add(ERROR, f"{data_dir}: {child}/ found in several places: "
                      f"{', '.join(os.path.join(r, child) for r in roots)}; pass the directory "
                      f"above the one to use as --data_dir.")
    return None
  root = roots[0]
  where = os.path.relpath(os.path.join(root, child), data_dir)
  report.add(NOTE, f"found {os.path.join(root, child)}" + (
      f" ({where} under {data_dir})" if root != data_dir and not where.startswith("..") else ""))
  return root


def _final_newline(report: Report, path: str) -> None:
  with open(path, "rb") as f:
    f.seek(0, os.SEEK_END)
    if not f.tell():
      return
    f.seek(-1, os.SEEK_END)
    if f.read(1) != b"\n":
      report.add(DEFECT, f"{path}: the last line has no newline: the file may be cut short (an "
                         f"interrupted download or unpack?).")


# ------------------------------------------------------------------------------------- ListOps
def check_listops(data_dir: str) -> Report:
  cfg = listops.data_config()
  report = Report(f"ListOps (LRA release) under {data_dir}")
  root = _locate(report, data_dir, listops.SUBDIR, "lra_release/listops-1000/")
  if root is None:
    return report
  for split in listops.SPLITS:
    path = listops.split_path(root, split)
    if not os.path.isfile(path):
      report.add(ERROR, f"{path}: missing (the loader reads basic_{{train,val,test}}.tsv).")
      continue
    try:
      arrays = listops.load_split(root, split, cfg.max_length)
    except ValueError as e:
      report.add(ERROR, str(e))
      continue
    count = len(arrays["labels"])
    if not count:
      report.add(ERROR, f"{path}: no examples after the header.")
      continue
    longest = int((arrays["inputs"] != PAD_ID).sum(axis=1).max())
    report.add(OK, f"{path}: {count:,} examples after the header 'Source\\tTarget' (as the loader "
                   f"expects), up to {longest:,} tokens (max_length {cfg.max_length})")
    _final_newline(report, path)
    if count != LISTOPS_RELEASE[split]:
      report.add(NOTE, f"{path}: the release's file has {LISTOPS_RELEASE[split]:,} examples.")
  report.flags = [_flag("data_dir", os.path.abspath(root))]
  return report


# ----------------------------------------------------------------------------------- Retrieval
def check_retrieval(data_dir: str) -> Report:
  report = Report(f"Retrieval (AAN pairs, LRA release) under {data_dir}")
  root = _locate(report, data_dir, retrieval.SUBDIR, "lra_release/lra_release/tsv_data/")
  if root is None:
    return report
  for split in retrieval.SPLITS:
    path = os.path.join(root, retrieval.SUBDIR, retrieval.file_name(split))
    if not os.path.isfile(path):
      report.add(ERROR, f"{path}: missing (the loader reads new_aan_pairs.{{train,eval,test}}.tsv; "
                        f"`val` is the eval file).")
      continue
    try:
      # Documents cut to 1 byte: the checks are the loader's, without holding the texts.
      _, labels = retrieval._read_rows(path, 1)  # pylint: disable=protected-access
    except ValueError as e:
      message = str(e)
      if f"{path}:1: label" in message:
        message += (" The AAN files have no header line: the loader reads line 1 as a pair.")
      report.add(ERROR, message)
      continue
    positive = sum(labels)
    report.add(OK, f"{path}: {len(labels):,} pairs, no header (as the loader expects), "
                   f"{positive:,} labelled 1 and {len(labels) - positive:,} labelled 0")
    _final_newline(report, path)
  report.flags = [_flag("data_dir", os.path.abspath(root))]
  return report


# ---------------------------------------------------------------------------------- Pathfinder
def _listed(paths, total=None) -> str:
  total = len(paths) if total is None else total
  return ", ".join(paths[:_MAX_LISTED]) + (f" and {total - _MAX_LISTED} more"
                                            if total > _MAX_LISTED else "")


def _metadata_consistency(report: Report, directory: str, meta_paths: list[str]) -> list:
  """(png path, label, where) of every metadata line, with the loader's parser; duplicate images
  and lines whose fields disagree (image directory vs metadata file, index vs file name) reported."""
  records, seen, duplicates, mismatched = [], {}, [], []
  for meta in meta_paths:
    k = os.path.basename(meta)[:-len(".npy")]
    parsed = pathfinder._read_metadata(meta, directory)  # pylint: disable=protected-access
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
    report.add(DEFECT, f"{len(duplicates)} metadata line(s) list an image listed before (the "
                       f"loader reads it twice): {_listed(duplicates)}.")
  if mismatched:
    report.add(NOTE, f"{len(mismatched)} metadata line(s) are not `imgs/<k> sample_<i>.png <i>` "
                     f"for their metadata/<k>.npy (the loader only reads fields 1, 2 and 4): "
                     f"{_listed(mismatched)}.")
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
      _, _, skipped = pathfinder.read_images([(p, label) for p, label, _ in chunk], resolution)
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


def _check_difficulty(report: Report, root: str, resolution: int, name: str, images: str) -> bool:
  """Checks one difficulty directory; whether the loader would read it."""
  directory = pathfinder.difficulty_path(root, resolution, name)
  errors = report.count(ERROR)
  try:
    pathfinder.check_data_dir(root, resolution, name)
    meta_paths = pathfinder._metadata_files(directory)  # pylint: disable=protected-access
    records = _metadata_consistency(report, directory, meta_paths)
  except (FileNotFoundError, ValueError) as e:
    report.add(ERROR, str(e))
    return False
  if not records:
    report.add(ERROR, f"{directory}/metadata: no records in {len(meta_paths)} metadata file(s).")
    return False
  problems = _image_problems(records, resolution, images)
  skipped = {path for found in problems.values() for path, _ in found}
  for kind, found in sorted(problems.items()):
    report.add(DEFECT, f"{len(found)} {kind} image(s) in {name} (the loader skips them): "
                       f"{_listed([f'{path} ({why})' for path, why in found])}.")
  orphans = _orphans(directory, records)
  if orphans:
    report.add(DEFECT, f"{len(orphans)} image(s) under {directory}/imgs that no metadata line lists "
                       f"(an incomplete metadata file?): {_listed(orphans)}.")
  n = len(records)
  cuts = {"train": (0, n * 8 // 10), "val": (n * 8 // 10, n * 9 // 10), "test": (n * 9 // 10, n)}
  usable = {s: sum(1 for p, _, _ in records[a:b] if p not in skipped) for s, (a, b) in cuts.items()}
  for split, count in usable.items():
    if not count:
      report.add(ERROR, f"{directory}: the {split} split (records {cuts[split][0]}..."
                        f"{cuts[split][1] - 1} of {n}) has no readable image.")
  summary = ", ".join(f"{s} {c:,}" for s, c in usable.items())
  counts = ", ".join(f"{len(p)} {k}" for k, p in sorted(problems.items())) or "none"
  checked = "decoded" if images == "decode" else "present and non-empty (not decoded)"
  report.add(OK if report.count(ERROR) == errors else NOTE,
             f"{directory}: {n:,} images listed in {len(meta_paths)} metadata file(s), {checked}; "
             f"skipped: {counts}; readable per split: {summary}")
  return report.count(ERROR) == errors


def check_pathfinder(data_dir: str, resolution: int, difficulty: str | None,
                     images: str = "decode") -> Report:
  name = f"pathfinder{resolution}"
  report = Report(f"Pathfinder {resolution}x{resolution} (LRA release) under {data_dir}")
  root = _locate(report, data_dir, name, f"lra_release/{name}/")
  if root is None:
    return report
  base = os.path.join(root, name)
  present = sorted(e.name for e in os.scandir(base) if e.is_dir() and not e.name.startswith("."))
  known = pathfinder.CONTOUR_LENGTH
  by_dir = {d: k for k, d in pathfinder.DIFFICULTIES.items()}
  for other in present:
    if other not in known:
      report.add(NOTE, f"{os.path.join(base, other)}: not a difficulty the loader reads (it reads "
                       + ", ".join(f"{d} = {by_dir[d]}" for d in known) + ").")
  if difficulty:
    wanted = [pathfinder.difficulty_dir(difficulty)]
  else:
    wanted = [d for d in known if d in present]
    if not wanted:
      report.add(ERROR, f"{base}: none of {', '.join(known)} is there.")
      return report
    for d in known:
      if d not in present:
        report.add(NOTE, f"{os.path.join(base, d)} ({by_dir[d]}): absent.")
  readable = [d for d in wanted if _check_difficulty(report, root, resolution, d, images)]
  report.flags = [_flag("data_dir", os.path.abspath(root))]
  default = pathfinder.difficulty_dir(pathfinder.data_config(resolution).difficulty)
  if readable and default not in readable:
    report.flags.append(_flag("difficulty", by_dir[readable[-1]]))
  return report


# ---------------------------------------------------------------------------------------- TFDS
def _tfds_root(data_dir: str, name: str) -> str | None:
  """The TFDS data_dir holding `name`/: data_dir, a directory above it (if data_dir is inside the
  dataset) or below it; None if none has it."""
  parts = os.path.abspath(data_dir).split(os.sep)
  if name in parts:
    return os.sep.join(parts[:len(parts) - 1 - parts[::-1].index(name)]) or os.sep
  roots = find_dirs(data_dir, name, max_depth=2)
  return roots[0] if roots else None


def can_build(name: str) -> tuple[bool, str]:
  """Whether `tfds build` can work here: TensorFlow installed and the download host reachable."""
  if importlib.util.find_spec("tensorflow") is None:
    return False, "TensorFlow, which `tfds build` needs, is not installed here"
  host, port = TFDS_HOSTS[name]
  try:
    socket.create_connection((host, port), timeout=5).close()
  except OSError as e:
    return False, f"{host} cannot be reached ({e})"
  return True, ""


def build(name: str, data_dir: str) -> None:
  """`tfds build NAME --data_dir=DIR` (downloads, then writes TFRecord shards; needs TensorFlow)."""
  text.tfds_builder(name, data_dir=data_dir).download_and_prepare()


def check_tfds(task: str, data_dir: str, allow_build: bool = True) -> Report:
  module = text if task == "text" else image
  name = module.TFDS_NAME
  report = Report(f"{'Text' if task == 'text' else 'Image'} (TFDS {name}) under {data_dir}")
  root = _tfds_root(data_dir, name)
  if root is None or not text.tfds_builder(name, data_dir=root).is_prepared():
    possible, why = can_build(name) if allow_build else (False, "building is off (--no_build)")
    if not possible:
      report.add(ERROR, f"{os.path.join(data_dir, name)}: TFDS {name} is not prepared there, and "
                        f"it cannot be built here: {why}. On a machine with network run `pip "
                        f"install tensorflow tensorflow-datasets && tfds build {name} "
                        f"--data_dir=<dir>`, copy <dir>/{name} into {data_dir}, and run this "
                        f"check again.")
      return report
    report.add(NOTE, f"building TFDS {name} into {data_dir} (`tfds build {name} "
                     f"--data_dir={data_dir}`)")
    build(name, data_dir)
    root = data_dir
  builder = text.tfds_builder(name, data_dir=root)
  info = builder.info
  formats = sorted(f.value for f in info.available_file_formats()) or ["unset (TFRecord)"]
  report.add(NOTE, f"found {builder.data_dir}: version {info.version}, "
                   f"format {', '.join(formats)}")
  for split in module.SPLITS:
    if task == "text" and split == "val":
      continue  # The TFDS test split, read for `test`.
    try:
      arrays = (text.load_split(split, max_length=16, data_dir=root) if task == "text"
                else image.load_split(split, data_dir=root))
    except (FileNotFoundError, ValueError, tfrecord.TFRecordError) as e:
      report.add(ERROR, str(e))
      continue
    tfds_split = text.TFDS_SPLITS[split] if task == "text" else (
        "test" if split == "test" else "train")
    counts = np.bincount(arrays["labels"], minlength=module.NUM_CLASSES)
    what = {"val": "the last 10% of TFDS train (LRA)", "train": "TFDS train" + (
        "[:90%]" if task == "image" else ""), "test": "TFDS test" + (
        " (also val, as LRA)" if task == "text" else "")}[split]
    report.add(OK if len(arrays["labels"]) else ERROR,
               f"{split}: {len(arrays['labels']):,} examples from {what}, every record read "
               f"(labels: {', '.join(map(str, counts.tolist()))})")
    full = TFDS_FULL[name][tfds_split]
    total = info.splits[tfds_split].num_examples
    if split != "val" and total != full:
      report.add(NOTE, f"TFDS {name} {tfds_split}: {total:,} examples; the full dataset has "
                       f"{full:,}.")
  report.flags = [_flag("data_dir", os.path.abspath(root))]
  return report


# --------------------------------------------------------------------------------- command line
def check(task: str, data_dir: str, *, resolution: int | None = None,
          difficulty: str | None = None, images: str = "decode", allow_build: bool = True
          ) -> Report:
  data_dir = os.path.expanduser(data_dir)
  if not os.path.isdir(data_dir) and task not in ("text", "image"):
    report = Report(f"{task} under {data_dir}")
    report.add(ERROR, f"{data_dir}: no such directory.")
    return report
  if task == "listops":
    return check_listops(data_dir)
  if task == "retrieval":
    return check_retrieval(data_dir)
  if task in ("pathfinder", "pathx"):
    return check_pathfinder(data_dir, resolution or (128 if task == "pathx" else 32), difficulty,
                            images)
  if task in ("text", "image"):
    return check_tfds(task, data_dir, allow_build)
  raise ValueError(f"--task={task!r} must be one of {TASKS}.")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m spt_jax.data.prepare", description=__doc__.split("\n\n")[0].strip(),
      epilog="Exit status: 0 complete, 1 the loader would refuse the data, 2 the loader reads it "
             "but skips or tolerates something. The last line is the flags to pass to main.py.")
  parser.add_argument("--task", required=True, choices=TASKS)
  parser.add_argument("--data_dir", required=True,
                      help="an lra_release directory (or one above it), or a TFDS data_dir")
  parser.add_argument("--resolution", type=int, choices=pathfinder.RESOLUTIONS,
                      help="Pathfinder resolution (default 32; 128 for pathx)")
  parser.add_argument("--difficulty",
                      choices=sorted(pathfinder.DIFFICULTIES) + sorted(pathfinder.CONTOUR_LENGTH),
                      help="Pathfinder difficulty to check (default: every one present)")
  parser.add_argument("--images", choices=("decode", "stat"), default="decode",
                      help="Pathfinder images: decode each (default), or only check presence and "
                           "size")
  parser.add_argument("--no_build", action="store_true",
                      help="TFDS tasks: never run `tfds build`, only check")
  args = parser.parse_args(argv)
  report = check(args.task, args.data_dir, resolution=args.resolution, difficulty=args.difficulty,
                 images=args.images, allow_build=not args.no_build)
  print(report.render())
  return report.exit_code


if __name__ == "__main__":
  sys.exit(main())
