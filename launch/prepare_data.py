"""Before a multi-process launch: load every data section a main.py command's phases read, once,
generating it into config.data.cache_dir where the task generates (ListOps, Pathfinder), so that the
processes find it there instead of each generating its own copy.

  python launch/prepare_data.py --config=configs/listops_spt.py --workdir=runs/x [--config.a=b ...]
  python launch/prepare_data.py --finished --config=... --workdir=...   # exit 0: every phase done

It takes main.py's own flags (the same command line; the workdir is only read, by --finished), so
the data it prepares is exactly the data the run loads. launch/slurm.sbatch runs it as one task before
the training step, and --finished after it, to tell a run that stopped at the time limit (requeue)
from one that is done.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

import main  # noqa: E402,F401 - defines main.py's flags: --config (and overrides), --workdir, ...
from spt_jax import config_lib, experiment, metric_writers  # noqa: E402
from spt_jax.data import pipeline, tasks  # noqa: E402

flags.DEFINE_bool("finished", False, "Prepare nothing: exit 0 if every phase of the run in "
                  "--workdir has finished (its results.json), 3 if not.")
NOT_FINISHED = 3


def prepare(argv) -> int:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  config, workdir = flags.FLAGS.config, flags.FLAGS.workdir
  names = config_lib.phase_names(config)
  if flags.FLAGS.finished:
    left = [n for n in names
            if not (metric_writers.workdir_path(workdir) / n / "results.json").exists()]
    print(f"prepare_data: {workdir}: " + (f"not finished ({', '.join(left)} to run)" if left
                                          else "every phase finished"), flush=True)
    return NOT_FINISHED if left else 0
  try:
    experiment.check_data_dirs(config, names)
    for section in dict.fromkeys(experiment.data_section(config, n) for n in names):
      task = tasks.load(config[section])
      sizes = ", ".join(f"{split} {pipeline.num_examples(arrays)}"
                        for split, arrays in task.splits.items())
      print(f"prepare_data: config.{section}: {task.name} ({sizes}) from {task.source}", flush=True)
  except (ValueError, OSError) as e:
    print(f"error: {e}", file=sys.stderr, flush=True)
    return 1
  return 0


if __name__ == "__main__":
  app.run(lambda argv: sys.exit(prepare(argv)))
