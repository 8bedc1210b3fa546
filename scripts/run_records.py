r"""A sweep workdir's finished runs as small files that can be committed, and back.

Long studies outlive the machines they run on: a workdir can be lost between sessions, and with it
every finished run. `save` copies what the sweep tables, figures and `steps_to` read from each
finished run (its results.json, run_spec.json, and per phase results.json, metrics.jsonl,
config.json, report.md, reference_levels.json, data.json, attention_proximity.json,
init_scales_row.json) into a records directory, a few hundred KB per run, and of checkpoints
only a pretraining phase's newest
`best` one (the hand-off other runs load); `restore` copies them back into a workdir, where the
sweep runner then counts those runs as finished and skips them, and the tables regenerate. Run specs name the
workdir of the sweep that wrote them; records keep `{workdir}` in its place, so a restore into
another directory is one the sweep accepts (save with --workdir set to the sweep's own --workdir).

  python scripts/run_records.py save --workdir=~/spt_runs/lra_plateau --to=docs/results/lra_plateau/records
  python scripts/run_records.py restore --records=docs/results/lra_plateau/records --workdir=~/spt_runs/lra_plateau

A restored run has no other checkpoints: it cannot be resumed or analysed at another checkpoint,
but runs that start from its pretraining (`init_from.source={workdir}/spt/seed_{seed}/pretrain`)
can. `restore` never overwrites a file already in
the workdir (a run trained there is kept as it is); `save` overwrites its own earlier records.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.fspath(REPO))

from spt_jax import sweep  # noqa: E402

RUN_FILES = ("results.json", "run_spec.json")
WORKDIR = "{workdir}"  # stands for the workdir in saved run specs, as in sweep configs
# Phases whose hand-off checkpoint is kept too (a few hundred KB at the study's sizes): other runs
# start from them (init_from.source={workdir}/spt/seed_{seed}/pretrain), and retraining one costs
# the longest phase of a study.
HANDOFF_PHASES = ("pretrain",)
# attention_proximity.json, init_scales_row.json: a run's row of scripts/lra_plateau_attention.py's
# and scripts/init_scales_report.py's tables, measured from checkpoints the records leave out.
PHASE_FILES = ("results.json", "metrics.jsonl", "config.json", "report.md", "reference_levels.json",
               "data.json", "attention_proximity.json", "init_scales_row.json")


def finished_runs(workdir: Path):
  """Run directories (relative to `workdir`) that the sweep runner counts as finished: every phase
  the run's spec names is in its results.json (a run stopped between phases is not saved: its
  next phase would need the checkpoints that records leave out)."""
  for spec in sorted(workdir.rglob("run_spec.json")):
    run = spec.parent
    if sweep.finished(os.fspath(run), json.loads(spec.read_text())["overrides"]):
      yield run.relative_to(workdir)


def _files(run: Path):
  for name in RUN_FILES:
    if (run / name).is_file():
      yield Path(name)
  for phase in sorted(p for p in run.iterdir() if p.is_dir()):
    for name in PHASE_FILES:
      if (phase / name).is_file():
        yield Path(phase.name) / name
    if phase.name in HANDOFF_PHASES:
      yield from (f.relative_to(run) for f in _handoff_checkpoint(phase))


def _handoff_checkpoint(phase: Path):
  """The files of the phase's newest `best` checkpoint (what `init_from.checkpoint='best'` loads)."""
  best = phase / "checkpoints" / "best"
  steps = [d for d in best.iterdir() if d.is_dir() and d.name.isdigit()] if best.is_dir() else []
  if steps:
    newest = max(steps, key=lambda d: int(d.name))
    yield from sorted(f for f in newest.rglob("*") if f.is_file())


def save(workdir: Path, to: Path) -> int:
  """Copies every finished run's records from `workdir` to `to`; returns the number of runs."""
  if not workdir.is_dir():
    raise SystemExit(f"--workdir={workdir}: not a directory.")
  runs = list(finished_runs(workdir))
  for rel in runs:
    for f in _files(workdir / rel):
      dest = to / rel / f
      dest.parent.mkdir(parents=True, exist_ok=True)
      if f.name == "run_spec.json":  # the sweep compares specs: keep them free of this workdir
        dest.write_text(_replace_in_strings(workdir / rel / f, os.fspath(workdir), WORKDIR))
      else:
        shutil.copyfile(workdir / rel / f, dest)
  return len(runs)


def _replace_in_strings(path: Path, old: str, new: str) -> str:
  def walk(x):
    if isinstance(x, str):
      return x.replace(old, new)
    if isinstance(x, dict):
      return {k: walk(v) for k, v in x.items()}
    return [walk(v) for v in x] if isinstance(x, list) else x
  return json.dumps(walk(json.loads(path.read_text())), indent=2)


def restore(records: Path, workdir: Path) -> tuple[int, int]:
  """Copies records into `workdir`, never over an existing file; returns (runs restored, runs
  left as they were because the workdir already has them)."""
  if not records.is_dir():
    raise SystemExit(f"--records={records}: not a directory.")
  restored = kept = 0
  for rel in finished_runs(records):
    if (workdir / rel / "results.json").exists() or (workdir / rel / "run_spec.json").exists():
      kept += 1
      continue
    for f in _files(records / rel):
      dest = workdir / rel / f
      dest.parent.mkdir(parents=True, exist_ok=True)
      if f.name == "run_spec.json":
        dest.write_text(_replace_in_strings(records / rel / f, WORKDIR, os.fspath(workdir)))
      else:
        shutil.copyfile(records / rel / f, dest)
    restored += 1
  return restored, kept


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  sub = parser.add_subparsers(dest="command", required=True)
  s = sub.add_parser("save", help="workdir -> records")
  s.add_argument("--workdir", required=True)
  s.add_argument("--to", required=True)
  r = sub.add_parser("restore", help="records -> workdir")
  r.add_argument("--records", required=True)
  r.add_argument("--workdir", required=True)
  args = parser.parse_args(argv)
  expand = lambda p: Path(os.path.expanduser(p)).resolve()  # noqa: E731
  paths = {k: expand(v) for k, v in vars(args).items() if k != "command"}
  os.chdir(REPO)  # run specs name their configs relative to the repository
  if args.command == "save":
    print(f"Saved the records of {save(paths['workdir'], paths['to'])} finished run(s).")
  else:
    restored, kept = restore(paths["records"], paths["workdir"])
    print(f"Restored {restored} run(s); {kept} already in the workdir were left as they were.")


if __name__ == "__main__":
  sys.exit(main())
