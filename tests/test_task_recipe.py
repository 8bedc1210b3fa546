"""docs/extending.md's "A new task", followed from outside the package: a toy task declared as a task
module declares itself (config, loader, signature, smoke sizes, the check of its files and a
variant), added to the table, loads through `tasks`, and `python -m spt_jax.data.prepare` checks its
files through the table, under its name and its variant's, with the shared report's verdicts."""
from __future__ import annotations

import os
import shlex

import ml_collections
import numpy as np
import pytest

from spt_jax.data import checks, listops, prepare, retrieval, tasks
from spt_jax.data.base import Task, TaskData
from spt_jax.data.vocab import PAD_ID, Vocabulary

# ------------------------------------------------------------------ the toy task, as its module
SUBDIR = "toy-data"
SPLITS = ("train", "val", "test")
VOCAB = Vocabulary(tokens=("a", "b"))


def data_config(**overrides) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict(dict(task="toy", data_dir="", max_length=8))
  c.update(overrides)
  return c


def read_split(root: str, split: str, max_length: int) -> dict[str, np.ndarray]:
  """`<root>/toy-data/<split>.tsv`: one `label<TAB>tokens` line per example."""
  path = os.path.join(root, SUBDIR, f"{split}.tsv")
  inputs, labels = [], []
  with open(path, encoding="utf-8") as f:
    for lineno, line in enumerate(f, start=1):
      label, _, text = line.rstrip("\n").partition("\t")
      if label not in ("0", "1"):
        raise ValueError(f"{path}:{lineno}: label {label!r} is not 0 or 1.")
      ids = [VOCAB.id_of(t) for t in text.split()][:max_length]
      inputs.append(ids + [PAD_ID] * (max_length - len(ids)))
      labels.append(int(label))
  return {"inputs": np.array(inputs, np.int32).reshape(-1, max_length),
          "labels": np.array(labels, np.int32)}


def load(cfg) -> TaskData:
  splits = {s: read_split(cfg.data_dir, s, cfg.max_length) for s in SPLITS}
  return TaskData("toy", VOCAB, 2, cfg.max_length, splits, cfg.data_dir)


def signature(cfg) -> dict:
  return {"task": "toy", "input_kind": "tokens", "vocab": VOCAB.tokens,
          "max_length": cfg.max_length}


def smoke(cfg) -> dict:
  return {"data": {}, "phase": {}}


def check_files(data_dir: str, *, max_length: int | None = None, **_) -> checks.Report:
  max_length = max_length or data_config().max_length
  report = checks.Report(f"Toy (max_length {max_length}) under {data_dir}")
  root = checks.locate(report, data_dir, SUBDIR, f"toy/{SUBDIR}/")
  if root is None:
    return report
  for split in SPLITS:
    path = os.path.join(root, SUBDIR, f"{split}.tsv")
    try:
      arrays = read_split(root, split, max_length)
    except (OSError, ValueError) as e:
      report.add(checks.ERROR, str(e))
      continue
    report.add(checks.OK, f"{path}: {len(arrays['labels'])} examples")
    checks.final_newline(report, path)
  report.flags = [checks.flag("data_dir", os.path.abspath(root))]
  return report


TOY = Task("toy", data_config, load, signature, smoke, check=check_files,
           variants={"toy_long": {"max_length": 16}})
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def toy(monkeypatch, tmp_path):
  """The toy task in the table, and its files two levels below tmp_path."""
  monkeypatch.setitem(tasks.TASKS, "toy", TOY)
  directory = tmp_path / "download" / SUBDIR
  directory.mkdir(parents=True)
  for split, rows in (("train", ["1\ta b a", "0\tb b", "1\ta"]), ("val", ["0\tb"]),
                      ("test", ["1\ta a"])):
    (directory / f"{split}.tsv").write_text("".join(f"{row}\n" for row in rows))
  return tmp_path


def run(capsys, *args) -> tuple[int, str]:
  code = prepare.main(list(args))
  return code, capsys.readouterr().out


def test_a_toy_task_loads_through_the_table(toy):
  cfg = tasks.get("toy").config(data_dir=str(toy / "download"))
  data = tasks.load(cfg)
  assert [len(data.splits[s]["labels"]) for s in SPLITS] == [3, 1, 1]
  assert data.splits["train"]["inputs"][0].tolist()[:4] == [3, 4, 3, PAD_ID]
  assert tasks.signature(cfg)["vocab"] == ("a", "b")
  assert tasks.variants()["toy_long"] == (TOY, {"max_length": 16})
  assert tasks.get("toy").config(**tasks.variants()["toy_long"][1]).max_length == 16


def test_prepare_checks_the_toy_task_through_the_table(toy, capsys):
  code, out = run(capsys, "--task=toy", f"--data_dir={toy}")
  assert code == 0, out
  assert out.startswith(f"Toy (max_length 8) under {toy}\n")
  assert f"found {toy / 'download' / SUBDIR} (download/{SUBDIR} under {toy})" in out
  flags = shlex.split(out.splitlines()[-1])
  assert flags == [f"--config.data.data_dir={toy / 'download'}"]
  # The variant: the same check, given the variant's settings.
  code, out = run(capsys, "--task=toy_long", f"--data_dir={toy}")
  assert code == 0 and out.startswith(f"Toy (max_length 16) under {toy}\n"), out


def test_prepare_reports_the_toy_tasks_defects_with_the_shared_verdicts(toy, capsys):
  val = toy / "download" / SUBDIR / "val.tsv"
  val.write_text("0\tb")  # Its last line without its newline: read, but a sign of a cut file.
  code, out = run(capsys, "--task=toy", f"--data_dir={toy}")
  assert code == 2 and f"DEFECT  {val}: the last line has no newline" in out, out
  assert "USABLE with 1 defect(s)" in out
  val.write_text("2\tb\n")
  code, out = run(capsys, "--task=toy", f"--data_dir={toy}")
  assert code == 1 and f"ERROR   {val}:1: label '2' is not 0 or 1." in out, out
  assert "REFUSED" in out and "--config.data.data_dir" not in out
  code, out = run(capsys, "--task=toy_long", f"--data_dir={toy / 'absent'}")
  assert code == 1 and out.startswith(f"toy_long under {toy / 'absent'}\n"), out
  assert "no such directory" in out


def test_a_variant_cannot_take_a_task_name(monkeypatch):
  monkeypatch.setitem(tasks.TASKS, "toy", Task("toy", data_config, load, signature, smoke,
                                               variants={"listops": {}}))
  with pytest.raises(ValueError, match="variant 'listops', a name already taken"):
    tasks.variants()


def test_the_release_task_directories_are_never_searched_through():
  """The searches skip the directories that hold one release task's files: each such task's own."""
  assert {listops.SUBDIR, retrieval.SUBDIR} <= checks._NO_DESCENT  # pylint: disable=protected-access
