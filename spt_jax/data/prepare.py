r"""Prepare and verify a task's data: `python -m spt_jax.data.prepare --task=TASK --data_dir=DIR`.

  python -m spt_jax.data.prepare --task=listops --data_dir=~/lra_release
  python -m spt_jax.data.prepare --task=pathfinder --data_dir=~/lra_release --difficulty=hard
  python -m spt_jax.data.prepare --task=text --data_dir=~/tensorflow_datasets

LRA release tasks (listops, retrieval, pathfinder, pathx): DIR is an unpacked `lra_release` or any
directory above the task's files; the task's directory is found wherever it sits (up to
`checks.MAX_DEPTH` levels down: `lra_release/listops-1000`, `lra_release/lra_release/tsv_data`,
...). Every file the loader reads is checked with the loader's own parsers: present, header or no
header as the loader expects, every row parsed, rows counted; for Pathfinder, every metadata line
against its image (present, non-empty, decodable at the resolution; `--images=stat` checks
presence and size only), unreadable or empty images counted per difficulty, and the 80/10/10
splits the loader cuts.

TFDS tasks (text, image): DIR is a TFDS data_dir (default layout `~/tensorflow_datasets`). A prepared
dataset, in TFRecord (`tfds build`'s default) or array_record, is read whole through the loader,
every TFRecord CRC checked. A missing one is built with `tfds build` where that can work (TensorFlow
installed and the download host reachable); otherwise the one command to run on a machine with
network is printed.

Each task checks its own files: the `check` of its `Task` (spt_jax/data/base.py), looked up in the
task table (spt_jax/data/tasks.py) by name or by a variant's name (`pathx`: the pathfinder task with
resolution 128, as its Task declares); the report and the helpers the checks share are in
spt_jax/data/checks.py. This module is the command line over them, and what runs `tfds build`.

The report ends with the exact `--config.data.data_dir=...` to pass. Exit status: 0 the data is
complete; 1 the loader would refuse it (each reason named with its file, and line where there is
one); 2 the loader reads it but skips or tolerates something (an empty or missing image, a last
line without its newline, ...), each named by path.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import socket
import sys

from spt_jax.data import checks, pathfinder, tasks, text


def checked_tasks() -> dict[str, tuple[tasks.Task, dict]]:
  """{--task name: (task, settings)}: each task of the table that declares a check, followed by its
  variants (Path-X: Pathfinder with resolution 128)."""
  return {name: (task, settings) for name, (task, settings) in tasks.variants().items()
          if task.check is not None}


# ---------------------------------------------------------------------------------------- TFDS
def can_build(dataset: text.TfdsDataset) -> tuple[bool, str]:
  """Whether `tfds build` can work here: TensorFlow installed and the download host reachable."""
  if importlib.util.find_spec("tensorflow") is None:
    return False, "TensorFlow, which `tfds build` needs, is not installed here"
  host, port = dataset.host
  try:
    socket.create_connection((host, port), timeout=5).close()
  except OSError as e:
    return False, f"{host} cannot be reached ({e})"
  return True, ""


def build(name: str, data_dir: str) -> None:
  """`tfds build NAME --data_dir=DIR` (downloads, then writes TFRecord shards; needs TensorFlow)."""
  text.tfds_builder(name, data_dir=data_dir).download_and_prepare()


def _builder(allow_build: bool):
  """A TFDS check's `build`: builds the dataset and returns None, or returns why it cannot."""
  def build_here(dataset: text.TfdsDataset, data_dir: str) -> str | None:
    possible, why = can_build(dataset) if allow_build else (False, "building is off (--no_build)")
    if not possible:
      return why
    build(dataset.name, data_dir)
    return None
  return build_here


# --------------------------------------------------------------------------------- command line
def check(task: str, data_dir: str, *, resolution: int | None = None,
          difficulty: str | None = None, images: str = "decode", allow_build: bool = True
          ) -> checks.Report:
  """The report of `task`'s check on data_dir; options left None take the variant's settings,
  then the check's defaults."""
  known = checked_tasks()
  if task not in known:
    raise ValueError(f"--task={task!r} must be one of {tuple(known)}.")
  entry, settings = known[task]
  data_dir = os.path.expanduser(data_dir)
  given = dict(resolution=resolution, difficulty=difficulty, images=images,
               build=_builder(allow_build))
  options = {**settings, **{k: v for k, v in given.items() if v is not None}}
  try:
    return entry.check(data_dir, **options)
  except checks.NoSuchDirectory:
    report = checks.Report(f"{task} under {data_dir}")
    report.add(checks.ERROR, f"{data_dir}: no such directory.")
    return report


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m spt_jax.data.prepare", description=__doc__.split("\n\n")[0].strip(),
      epilog="Exit status: 0 complete, 1 the loader would refuse the data, 2 the loader reads it "
             "but skips or tolerates something. The last line is the flags to pass to main.py.")
  parser.add_argument("--task", required=True, choices=tuple(checked_tasks()))
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
