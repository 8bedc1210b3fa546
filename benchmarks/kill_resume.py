"""Random SIGKILLs, then a rerun of the same command: is the finished run bit-identical to one that was
never interrupted? Prints `identical=K/N` and writes every trial to a JSON file.

  python benchmarks/kill_resume.py --runs=30 --out=/tmp/kill_resume.json
  python benchmarks/kill_resume.py --runs=4 --kills=3 --workers=2   # several kills per trial

One uninterrupted reference run of the config first (its wall time T bounds the kill times); then
each trial starts the same command in a fresh workdir, kills it (SIGKILL) at a uniformly random time
in (0, T) after start, `--kills` times in a row, and finally lets it finish. A trial is identical when
every phase's newest latest checkpoint (parameters and optimiser state), its best parameters, its
metrics.jsonl (less the timing column) and the results' metrics equal the reference's exactly.
Trials run `--workers` at a time, each process with one XLA device (`--cpu_devices=1`).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from spt_jax import checkpoints, tree  # noqa: E402

DEFAULT_OVERRIDES = ("--config.pretrain.checkpoint_every_steps=10",
                     "--config.pretrain.eval_every_steps=10",
                     "--config.finetune.checkpoint_every_steps=10",
                     "--config.finetune.eval_every_steps=10")
RESULT_KEYS = ("test_of_best", "best_val", "final_val", "steps")


def command(config: str, workdir: str, overrides) -> list[str]:
  return [sys.executable, os.path.join(ROOT, "main.py"), f"--config={config}",
          f"--workdir={workdir}", "--cpu_devices=1", "--cpu_processes=1", *overrides]


def run_to_end(cmd, timeout: float) -> float:
  start = time.time()
  out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
  if out.returncode != 0:
    raise RuntimeError(f"rc={out.returncode}: {out.stderr[-2000:]}")
  return time.time() - start


def where_killed(workdir: str) -> str:
  """The furthest point the killed run had reached, from what it left on disk."""
  reached = []
  for phase in sorted(os.listdir(workdir)) if os.path.isdir(workdir) else []:
    latest = os.path.join(workdir, phase, "checkpoints", "latest")
    if os.path.exists(os.path.join(workdir, phase, "results.json")):
      reached.append(f"{phase}:done")
    elif os.path.isdir(latest):
      steps = [s for s in os.listdir(latest) if s.isdigit()]
      reached.append(f"{phase}:{max(map(int, steps)) if steps else 'started'}")
  return ",".join(reached) or "before any checkpoint"


def snapshot(workdir: str) -> dict:
  """Everything a trial is compared on, as plain values."""
  out = {}
  results = json.load(open(os.path.join(workdir, "results.json")))
  for phase, res in results.items():
    out[f"{phase}/results"] = {k: res[k] for k in RESULT_KEYS}
    base = os.path.join(workdir, phase, "checkpoints")
    for kind, items in (("latest", ("params", "opt_state")), ("best", ("params",))):
      step = max(int(s) for s in os.listdir(os.path.join(base, kind)) if s.isdigit())
      for item in items:
        arrays = tree.flatten(checkpoints.restore_item(os.path.join(base, kind, str(step), item)))
        out[f"{phase}/{kind}/{step}/{item}"] = {p: np.asarray(v) for p, v in arrays.items()}
    records = [json.loads(line) for line in open(os.path.join(workdir, phase, "metrics.jsonl"))]
    for r in records:
      r.pop("steps_per_sec", None)
    out[f"{phase}/metrics"] = records
  return out


def differences(a: dict, b: dict) -> list[str]:
  diffs = [k for k in a.keys() ^ b.keys()]
  for key in a.keys() & b.keys():
    x, y = a[key], b[key]
    if isinstance(x, dict) and x and isinstance(next(iter(x.values())), np.ndarray):
      if x.keys() != y.keys() or any(not np.array_equal(x[p], y[p]) for p in x):
        diffs.append(key)
    elif x != y:
      diffs.append(key)
  return sorted(diffs)


def trial(index: int, args, reference: dict, ref_wall: float, scratch: str) -> dict:
  rng = random.Random(args.seed * 1000 + index)
  workdir = os.path.join(scratch, f"trial_{index}")
  cmd = command(args.config, workdir, args.overrides)
  kills = []
  for _ in range(args.kills):
    delay = rng.uniform(0.0, ref_wall)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
      proc.wait(timeout=delay)
      finished_first = True
    except subprocess.TimeoutExpired:
      proc.send_signal(signal.SIGKILL)
      proc.wait()
      finished_first = False
    kills.append({"after_s": round(delay, 2), "finished_before_kill": finished_first,
                  "reached": where_killed(workdir)})
  record = {"trial": index, "kills": kills}
  try:
    run_to_end(cmd, timeout=args.timeout)
    diffs = differences(reference, snapshot(workdir))
    record.update(identical=not diffs, differences=diffs)
  except Exception as e:  # A rerun that fails is the worst outcome: record it, keep going.
    record.update(identical=False, error=str(e)[-1500:])
  shutil.rmtree(workdir, ignore_errors=True)
  return record


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", default="configs/listops_spt.py:smoke")
  parser.add_argument("--overrides", nargs="*", default=list(DEFAULT_OVERRIDES),
                      help="--config.x=y flags given to every run")
  parser.add_argument("--runs", type=int, default=30)
  parser.add_argument("--kills", type=int, default=1, help="kills per trial before it may finish")
  parser.add_argument("--workers", type=int, default=1)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--timeout", type=float, default=600.0, help="seconds per uninterrupted run")
  parser.add_argument("--out", default="", help="JSON file for the trials and the summary")
  args = parser.parse_args(argv)

  scratch = tempfile.mkdtemp(prefix="kill_resume_")
  ref_dir = os.path.join(scratch, "reference")
  ref_wall = run_to_end(command(args.config, ref_dir, args.overrides), args.timeout)
  reference = snapshot(ref_dir)
  print(f"reference run: {ref_wall:.1f} s; kill times uniform in (0, {ref_wall:.1f}) s", flush=True)
  trials = []
  with concurrent.futures.ThreadPoolExecutor(max_workers=args.workers) as pool:
    futures = [pool.submit(trial, i, args, reference, ref_wall, scratch) for i in range(args.runs)]
    for future in concurrent.futures.as_completed(futures):
      t = future.result()
      trials.append(t)
      print(f"[{len(trials)}/{args.runs}] trial {t['trial']}: "
            f"{'identical' if t['identical'] else 'DIFFERENT'}; killed at "
            f"{[k['reached'] for k in t['kills']]} {t.get('differences', '') or t.get('error', '')}",
            flush=True)
  identical = sum(t["identical"] for t in trials)
  summary = {"identical": identical, "total": len(trials), "config": args.config,
             "overrides": args.overrides, "kills_per_trial": args.kills,
             "reference_wall_s": round(ref_wall, 2), "workers": args.workers}
  print(f"identical={identical}/{len(trials)}")
  if args.out:
    with open(args.out, "w") as f:
      json.dump({"summary": summary, "trials": sorted(trials, key=lambda t: t["trial"])}, f,
                indent=1)
  shutil.rmtree(scratch, ignore_errors=True)
  return 0 if identical == len(trials) else 1


if __name__ == "__main__":
  sys.exit(main())
