"""Runs an spt-jax experiment: `python main.py --config=configs/listops_spt.py --workdir=runs/x`.

Config variants after a colon (`configs/listops_spt.py:smoke`); any field can be overridden with
`--config.<path>=<value>` (e.g. `--config.pretrain.num_steps=100`). Re-running the same command on the
same workdir resumes where the run stopped.
"""
from absl import app, flags, logging
from ml_collections import config_flags

from spt_jax import distributed, experiment, host_memory

config_flags.DEFINE_config_file("config", None, "Config file, optionally with ':variant'.",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Where checkpoints, metrics and results.json go.")
flags.DEFINE_integer("cpu_devices", -1, "On the CPU backend, split the host into this many devices "
                     "for the data-parallel step (-1, the default: one per core, as far as the batch "
                     "sizes divide; 1: one device, XLA's own multithreading). On 2 cores -1 is "
                     "1.3-1.5x faster (README, Performance). A resumed run must use the same count to "
                     "be bit-identical.")
flags.DEFINE_bool("retain_freed_memory", True, "Keep freed host memory in the process (glibc malloc "
                  "settings, spt_jax/host_memory.py): on the CPU backend 10-20% faster steps, for "
                  "up to ~5x the step's temporaries in resident memory (given back automatically "
                  "when that would exceed half the available memory).")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if flags.FLAGS.retain_freed_memory:
    host_memory.retain_freed_memory()  # Before the backend starts its threads.
  # Before anything touches a device: the backend is created once, and one created before joining
  # the multi-process job would only ever see this process's devices.
  distributed.split_cpu_into_devices(flags.FLAGS.config, flags.FLAGS.cpu_devices)
  distributed.maybe_initialize()
  experiment.quiet_orbax_logging()
  logging.info("Config:\n%s", flags.FLAGS.config)
  experiment.run(flags.FLAGS.config, flags.FLAGS.workdir)


if __name__ == "__main__":
  app.run(main)
