"""What a task's check of a user's files reports, and the helpers the checks share.

Each task module that reads downloaded files declares `check(data_dir, **options) -> Report` in its
`Task` (spt_jax/data/base.py); `python -m spt_jax.data.prepare` runs it and prints the report. A
check reads the files with the loader's own parsers, so that what it accepts the loader reads.
Findings have a level: ERROR (the loader would refuse the data), DEFECT (it reads the data but
skips or tolerates something), ok, note.
"""
from __future__ import annotations

import dataclasses
import os
import shlex

ERROR, DEFECT, OK, NOTE = "ERROR", "DEFECT", "ok", "note"
EXIT = {OK: 0, ERROR: 1, DEFECT: 2}
# How far below DIR a task's directory is looked for.
MAX_DEPTH = 3
# Directories never searched through: those of the LRA release that hold one task's files only
# (listops-1000/, tsv_data/) and Pathfinder's image trees (thousands of entries each). Named here
# rather than by their task modules, since every search passes them, whichever task it is for.
_NO_DESCENT = frozenset(("imgs", "metadata", "listops-1000", "tsv_data"))
# Paths of one kind of problem named in a report; the rest are counted.
MAX_LISTED = 5


class NoSuchDirectory(Exception):
  """The data_dir a check was given does not exist. The command line reports it under the name the
  user typed, which a check shared by several names (Pathfinder and Path-X) cannot know."""


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


def flag(key: str, value) -> str:
  """`--config.data.<key>=<value>`, quoted for a shell."""
  return f"--config.data.{key}={shlex.quote(str(value))}"


def listed(paths, total=None) -> str:
  """The first MAX_LISTED of paths, and how many more there are."""
  total = len(paths) if total is None else total
  return ", ".join(paths[:MAX_LISTED]) + (f" and {total - MAX_LISTED} more"
                                           if total > MAX_LISTED else "")


# ------------------------------------------------------------------------------ finding the data
def find_dirs(data_dir: str, child: str, max_depth: int = MAX_DEPTH) -> list[str]:
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


def locate(report: Report, data_dir: str, child: str, release_path: str) -> str | None:
  """The one directory holding `child`/ (under data_dir, or above it when data_dir is that child
  or inside it), or None with an error in the report. NoSuchDirectory if data_dir is none."""
  if not os.path.isdir(data_dir):
    raise NoSuchDirectory(data_dir)
  parts = os.path.abspath(data_dir).split(os.sep)
  if child in parts:  # data_dir is the task's directory itself, or inside it.
    roots = [os.sep.join(parts[:len(parts) - 1 - parts[::-1].index(child)]) or os.sep]
  else:
    roots = find_dirs(data_dir, child)
  if not roots:
    report.add(ERROR, f"{data_dir}: no {child}/ directory in it or up to {MAX_DEPTH} levels down "
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


def final_newline(report: Report, path: str) -> None:
  """A DEFECT if the file's last line has no newline: a sign of a file cut short."""
  with open(path, "rb") as f:
    f.seek(0, os.SEEK_END)
    if not f.tell():
      return
    f.seek(-1, os.SEEK_END)
    if f.read(1) != b"\n":
      report.add(DEFECT, f"{path}: the last line has no newline: the file may be cut short (an "
                         f"interrupted download or unpack?).")
