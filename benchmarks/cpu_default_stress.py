r"""Runs main.py again and again while other processes load the CPU: does a run abort or hang?

  python benchmarks/cpu_default_stress.py --runs 40 --load 3 --out /tmp/stress_default.json
  python benchmarks/cpu_default_stress.py --runs 10 --load 3 --cpu-devices -1 --out /tmp/stress_percore.json
  python benchmarks/cpu_default_stress.py --runs 1 --load 1 --config.finetune.num_steps=10 --out s.json

With per-core CPU devices a configs/synthetic_scratch.py run aborted at step ~800 while the
machine was busy (XLA's 40 s all-reduce termination timeout). This script starts `--load` competing
processes (each a single-threaded numpy matmul loop, one busy core apiece), then runs `--runs`
consecutive `python main.py --config=<--config> --workdir=<fresh temp dir>`, each killed as a hang if
it takes longer than `--timeout-factor` x `--expected-s`. By default main.py gets no --cpu_devices,
so its own default is what is tested; `--cpu-devices N` passes --cpu_devices=N (-1: one per core),
`--cpu-processes N` --cpu_processes=N (one process per core, joined on localhost).
Arguments `--config.<path>=<value>` are forwarded to every run.

A run counts as ok (rc 0 and a results.json), an abort (any other exit; `rendezvous_aborts` counts
those whose output names XLA's rendezvous timeout) or a hang (killed at the timeout). Per run it
records rc, wall time, steps/s and devices from results.json, the 1-minute load average and the last
step train.py logged; of a failed run, XLA's rendezvous lines (if any; with the progress bar's step
when XLA first reported the wait) and the tail of its output. Prints, last, the line

  runs=N load=K aborts=A hangs=H ok=O mean_wall=...s mean_steps_per_sec=...

(means over ok runs) and writes everything as JSON to --out, rewritten after every run.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# One busy core per load process: numpy's BLAS would otherwise spread one product over every core.
_ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
_LOAD_CODE = ("import numpy as np\n"
              "a = np.random.default_rng(0).random((256, 256), dtype=np.float32)\n"
              "while True:\n"
              "  b = a @ a\n")


def _die_with_parent() -> None:
  """In a child, before exec: SIGKILL it when this script dies (Linux PR_SET_PDEATHSIG)."""
  try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
  except (OSError, AttributeError):
    pass


def start_load(count: int) -> list[subprocess.Popen]:
  env = dict(os.environ, **_ONE_THREAD)
  return [subprocess.Popen([sys.executable, "-c", _LOAD_CODE], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)
          for _ in range(count)]


def stop(procs: list[subprocess.Popen]) -> None:
  for p in procs:
    if p.poll() is None:
      p.kill()
  for p in procs:
    p.wait()


def steps_per_sec(results: dict) -> float | None:
  rates = [v["steps_per_sec"] for v in results.values()
           if isinstance(v, dict) and v.get("steps_per_sec")]
  return statistics.mean(rates) if rates else None


def one_run(index: int, args, forwarded: list[str]) -> dict:
  workdir = tempfile.mkdtemp(prefix=f"cpu_stress_{index}_")
  cmd = [sys.executable, os.path.join(ROOT, "main.py"), f"--config={args.config}",
         f"--workdir={workdir}", *forwarded]
  if args.cpu_devices is not None:
    cmd.append(f"--cpu_devices={args.cpu_devices}")
  if args.cpu_processes is not None:
    cmd.append(f"--cpu_processes={args.cpu_processes}")
  timeout = args.timeout_factor * args.expected_s
  record = {"run": index, "load_avg_1m_before": round(os.getloadavg()[0], 2)}
  log_path = os.path.join(workdir, "log.txt")
  started = time.time()
  with open(log_path, "w") as log:
    # Own session: a hang is killed with everything it started.
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=_die_with_parent)
    try:
      rc = proc.wait(timeout=timeout)
      hang = False
    except subprocess.TimeoutExpired:
      os.killpg(proc.pid, signal.SIGKILL)
      rc = proc.wait()
      hang = True
  record["wall_s"] = round(time.time() - started, 3)
  record["rc"] = rc
  record["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
  results_path = os.path.join(workdir, "results.json")
  results = None
  if os.path.exists(results_path):
    with open(results_path) as f:
      results = json.load(f)
  if hang:
    record["outcome"] = "hang"
  elif rc == 0 and results is not None:
    record["outcome"] = "ok"
  else:
    record["outcome"] = "abort"
  if results is not None:
    record["steps_per_sec"] = steps_per_sec(results)
    record["devices"] = sorted({v["devices"] for v in results.values()
                                if isinstance(v, dict) and "devices" in v})
  with open(log_path, errors="replace") as f:
    output = f.read()
  # XLA's own log line (file:line), not the quotation in spt_jax/platform.py's opt-in warning.
  rendezvous = re.search(r"^.*rendezvous\.cc:\d+.*$", output, re.M)
  record["rendezvous_timeout"] = rendezvous is not None
  if rendezvous:
    record["rendezvous_line"] = rendezvous.group(0)[-400:]
    # The progress bar's last "N/M [" before XLA's first complaint: the step it got stuck at.
    bars = re.findall(r"(\d+)/\d+ \[", output[:rendezvous.start() + rendezvous.group(0).find("rendezvous.cc")])
    record["progress_at_rendezvous"] = int(bars[-1]) if bars else None
    termination = re.search(r"^.*Termination timeout.*$", output, re.M)
    record["termination_line"] = termination.group(0)[-400:] if termination else None
  steps = re.findall(r"\] step (\d+)/\d+", output)  # train.py's log lines at each evaluation.
  record["last_logged_step"] = int(steps[-1]) if steps else None
  if record["outcome"] != "ok":
    record["output_tail"] = output[-3000:]
  shutil.rmtree(workdir, ignore_errors=True)
  return record


def summarize(args, records: list[dict], started: float) -> dict:
  ok = [r for r in records if r["outcome"] == "ok"]
  rates = [r["steps_per_sec"] for r in ok if r.get("steps_per_sec")]
  loads = [r["load_avg_1m_after"] for r in records]
  return {
      "runs": len(records), "load": args.load,
      "aborts": sum(r["outcome"] == "abort" for r in records),
      "hangs": sum(r["outcome"] == "hang" for r in records), "ok": len(ok),
      "rendezvous_aborts": sum(r["outcome"] == "abort" and r["rendezvous_timeout"]
                               for r in records),
      "mean_wall_s": statistics.mean(r["wall_s"] for r in ok) if ok else None,
      "max_wall_s": max((r["wall_s"] for r in ok), default=None),
      "mean_steps_per_sec": statistics.mean(rates) if rates else None,
      "mean_load_avg_1m": statistics.mean(loads) if loads else None,
      "cpu_devices": "main.py default" if args.cpu_devices is None else args.cpu_devices,
      "cpu_processes": "main.py default" if args.cpu_processes is None else args.cpu_processes,
      "devices": sorted({d for r in records for d in r.get("devices", [])}),
      "config": args.config, "timeout_s": args.timeout_factor * args.expected_s,
      "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
      "machine": platform.processor() or platform.machine(),
      "total_wall_s": round(time.time() - started, 1),
  }


def summary_line(s: dict) -> str:
  fmt = lambda v, spec: "nan" if v is None else format(v, spec)
  return (f"runs={s['runs']} load={s['load']} aborts={s['aborts']} hangs={s['hangs']} ok={s['ok']} "
          f"mean_wall={fmt(s['mean_wall_s'], '.1f')}s "
          f"mean_steps_per_sec={fmt(s['mean_steps_per_sec'], '.2f')}")


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
  parser.add_argument("--runs", type=int, default=40, help="consecutive main.py runs (default 40)")
  parser.add_argument("--load", type=int, default=3,
                      help="competing busy processes, one core each (default 3)")
  parser.add_argument("--config", default="configs/synthetic_scratch.py:smoke")
  parser.add_argument("--cpu-devices", type=int, default=None,
                      help="pass --cpu_devices=N to main.py (-1: one device per core); default: "
                           "pass nothing, i.e. test main.py's default")
  parser.add_argument("--cpu-processes", type=int, default=None,
                      help="pass --cpu_processes=N to main.py (-1: one process per core); "
                           "default: pass nothing")
  parser.add_argument("--expected-s", type=float, default=30.0,
                      help="expected wall time of one run under the load (default 30)")
  parser.add_argument("--timeout-factor", type=float, default=10.0,
                      help="a run longer than this x --expected-s is a hang and is killed "
                           "(default 10)")
  parser.add_argument("--out", required=True, help="JSON summary, rewritten after every run")
  args, forwarded = parser.parse_known_args(argv)
  bad = [a for a in forwarded if not a.startswith("--config.")]
  if bad:
    parser.error(f"unrecognized arguments {bad} (only --config.<path>=<value> is forwarded)")
  if args.runs < 1 or args.load < 0:
    parser.error("--runs must be >= 1 and --load >= 0")

  # SIGTERM/SIGHUP (e.g. a killed nohup job) unwind through `finally`, which stops the load.
  for sig in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, lambda signum, _: sys.exit(128 + signum))
  started = time.time()
  load = start_load(args.load)
  records: list[dict] = []
  try:
    time.sleep(1.0 if args.load else 0.0)  # Let the load processes get going.
    for i in range(args.runs):
      record = one_run(i, args, forwarded)
      records.append(record)
      print(f"[{i + 1}/{args.runs}] {record['outcome']} rc={record['rc']} wall={record['wall_s']:.1f}s "
            f"steps/s={record.get('steps_per_sec') or 0:.2f} devices={record.get('devices')} "
            f"loadavg={record['load_avg_1m_after']:.1f} last_step={record['last_logged_step']}"
            + (f" stuck_at_step={record['progress_at_rendezvous']} rendezvous: "
               f"{record['rendezvous_line'][-160:]}" if record.get("rendezvous_line") else ""),
            flush=True)
      summary = summarize(args, records, started)
      with open(args.out, "w") as f:
        json.dump({"summary": summary, "forwarded": forwarded, "records": records}, f, indent=1)
  finally:
    stop(load)
  print(json.dumps({k: v for k, v in summary.items()}), flush=True)
  print(summary_line(summary), flush=True)
  return summary


if __name__ == "__main__":
  main()
