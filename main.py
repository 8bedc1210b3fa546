"""Runs an spt-jax experiment: `python main.py --config=configs/listops_spt.py --workdir=runs/x`.

Config variants after a colon (`configs/listops_spt.py:smoke`); any field can be overridden with
`--config.<path>=<value>` (e.g. `--config.pretrain.num_steps=100`). Re-running the same command on the
same workdir resumes where the run stopped.
"""
import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from spt_jax import checkpoints, distributed, experiment, metric_writers, platform

config_flags.DEFINE_config_file("config", None, "Config file, optionally with ':variant'.",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Where checkpoints, metrics and results.json go.")
flags.DEFINE_integer("cpu_devices", 1, "On the CPU backend, how many devices the host is split into "
                     "for the data-parallel step. 1, the default: one device, XLA's own "
                     "multithreading, no cross-device collective to time out under load. -1 (one per "
                     "core, as far as the batch sizes divide) or N: opt-in, faster on idle cores, but "
                     "XLA aborts the run when the devices' in-process all-reduce waits over 40 s, "
                     "which a busy machine can cause (benchmarks/README.md); logged as a warning. A "
                     "resumed run must use the same count to be bit-identical (spt_jax/platform.py).")
flags.DEFINE_integer("cpu_processes", 2, "On the CPU backend, run as this many processes (at most "
                     "one per core; fewer where the batch sizes do not divide), each on its own "
                     "equal share of the cores with its slice of every batch, joined on localhost "
                     "(launch/local.sh --pin); -1: one per core; 1: this process alone. The "
                     "default, 2, is 1.2-1.8x faster than one process on 2 idle cores, and no "
                     "collective of it has XLA's 40 s abort under load (benchmarks/README.md). A "
                     "resumed run must use the same count to be bit-identical.")
flags.DEFINE_string("cores", "", "CPU cores this run may use, e.g. '0', '0,1' or '2-3' (Linux): the "
                    "process is confined to them and XLA sizes its thread pools to match, so that "
                    "runs sharing a machine each keep cores of their own ('': all; the sweep "
                    "runner gives each of its processes a disjoint set). A run is bit-identical "
                    "for the same number of XLA threads (--cpu_threads, by default one per core "
                    "here); another number changes float32 rounding (XLA:CPU splits some "
                    "operations by its thread count), so resume a run with the count it started "
                    "with.")
flags.DEFINE_integer("cpu_threads", 0, "XLA:CPU's thread pool size in each process (0: one per core "
                     "it may use, after --cores). Float32 results depend on this number, not on the "
                     "cores: a run confined to one core with --cpu_threads=2 is bit-identical to an "
                     "unconfined one on 2 cores (what the sweep runner gives its runs by default), "
                     "and slower than with one thread (benchmarks/README.md).")
flags.DEFINE_string("wandb_project", "", "Also log every metric to this Weights & Biases project "
                    "(pip install -e '.[wandb]'; process 0 only, one W&B run per phase, resumed "
                    "with the phase). '': metrics.jsonl and TensorBoard only.")
flags.DEFINE_string("wandb_entity", "", "The W&B entity (team or user); '': W&B's default.")
flags.DEFINE_enum("wandb_mode", "online", ["online", "offline"], "offline: W&B writes locally, "
                  "for `wandb sync` later.")
flags.DEFINE_bool("retain_freed_memory", True, "Keep freed host memory in the process (glibc malloc "
                  "settings, spt_jax/host_memory.py): on the CPU backend faster steps, for a few "
                  "times the step's temporaries in resident memory (given back automatically "
                  "when that would exceed half the available memory).")
flags.mark_flags_as_required(["config", "workdir"])


def launch_local_processes(processes: int) -> None:
  """Becomes launch/local.sh running this command as `processes` processes, one per core set."""
  if flags.FLAGS.cpu_devices != 1:
    raise app.UsageError(f"--cpu_processes={flags.FLAGS.cpu_processes} and --cpu_devices="
                         f"{flags.FLAGS.cpu_devices}: choose one (processes, one device each).")
  local = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch", "local.sh")
  pin = f"--pin={flags.FLAGS.cores}" if flags.FLAGS.cores else "--pin"
  logging.info("Running as %d processes, one per core set (launch/local.sh %s).", processes, pin)
  sys.stdout.flush()
  sys.stderr.flush()
  # Flags given later win: each process runs in itself, on the cores local.sh appends.
  os.execvpe("bash", ["bash", local, pin, str(processes), "--", *sys.argv[1:], "--cpu_processes=1"],
             dict(os.environ, PYTHON=sys.executable))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  requested = flags.FLAGS.cpu_processes
  if flags.FLAGS.cpu_devices != 1 and not flags.FLAGS["cpu_processes"].present:
    requested = 1  # Asked for per-core devices in this process, not for the default's processes.
  try:  # --cores and --cpu_threads are checked here, before any work
    processes = platform.cpu_process_count(flags.FLAGS.config, requested, flags.FLAGS.cores)
    if processes > 1:
      launch_local_processes(processes)
    # Before anything touches a device: the backend is created once, and one created before
    # joining the multi-process job would only ever see this process's devices.
    platform.configure_process(flags.FLAGS.config, flags.FLAGS.cpu_devices,
                               flags.FLAGS.retain_freed_memory, cores=flags.FLAGS.cores,
                               cpu_threads=flags.FLAGS.cpu_threads)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr, flush=True)
    sys.exit(1)
  distributed.maybe_initialize()
  experiment.quiet_orbax_logging()
  logging.info("Config:\n%s", flags.FLAGS.config)
  try:
    if flags.FLAGS.wandb_project:
      metric_writers.enable_wandb(flags.FLAGS.wandb_project, entity=flags.FLAGS.wandb_entity,
                                  mode=flags.FLAGS.wandb_mode)
    experiment.run(flags.FLAGS.config, flags.FLAGS.workdir)
  except (ValueError, OSError, FloatingPointError) as e:
    # Bad input (a config value, a data file, a checkpoint, a workdir) is reported in one message
    # that names the culprit; the traceback stays available for debugging.
    logging.vlog(1, "Traceback of the error below:", exc_info=True)
    print(f"error: {e}\n(--verbosity=1 shows the traceback)", file=sys.stderr, flush=True)
    if isinstance(e, checkpoints.DamagedCheckpointError):
      # Nothing is being written (restores come before training), but TensorStore threads of the
      # abandoned reads would print tracebacks into the interpreter's shutdown: leave at once.
      os._exit(1)
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
