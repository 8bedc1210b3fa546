"""Whether a phase can run on this machine: its memory before the first step, its time after the first.

Memory: the compiled train step's temporaries and outputs (XLA's memory analysis, per device; the
devices of a CPU host share its memory) against what is free for them (`platform.available_memory`:
host RAM on the CPU backend, each accelerator's `memory_stats()` elsewhere). A step that cannot fit
stops the run before it starts, with the estimate, the memory available and what each config field
that reduces it would give, instead of the kernel's OOM killer ending the process minutes later.

Time: once the first steps are timed (`ETA_PROBE_STEPS` or `ETA_PROBE_S`), a phase whose remaining
steps would take longer than `ETA_WARNING_S` at that rate gets one prominent warning with a variant
sized for this machine.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
import shlex
import sys
import time
from typing import Callable

import ml_collections
from absl import logging

from spt_jax import config_lib, platform
from spt_jax.models import transformer

# The share of the available memory a step may plan on: the rest is for the evaluation step, the
# input pipeline and the allocator's slack.
FIT_FRACTION = 0.9
# Seconds of compilation spent on estimating the remedies (each one compiles the step again): a run
# that cannot fit should say so within a minute of starting, not after a quarter of an hour.
ESTIMATE_BUDGET_S = 20.0


class StepMemoryError(ValueError, MemoryError):
  """The train step cannot fit in the memory available. A ValueError, so main.py reports it in one
  message."""


@dataclasses.dataclass(frozen=True)
class StepMemory:
  """Bytes per device of one compiled step; `devices` of them share the memory it is checked against
  (all devices on a CPU host, the job's other local processes' included; one accelerator
  otherwise)."""
  arguments: int
  outputs: int
  aliased: int      # outputs written into donated arguments
  temporaries: int
  devices: int = 1

  @classmethod
  def of(cls, compiled, devices) -> "StepMemory":
    m = compiled.memory_analysis()
    get = lambda key: int(getattr(m, key, 0) or 0) if m is not None else 0
    # A CPU host's memory is shared by all its devices, those of the job's other local processes too.
    shared = (len(devices) * platform.processes_sharing_this_host()
              if platform.shares_host_memory(devices) else 1)
    return cls(get("argument_size_in_bytes"), get("output_size_in_bytes"),
               get("alias_size_in_bytes"), get("temp_size_in_bytes"), shared)

  @property
  def needed(self) -> int:
    """What the step allocates when it runs; its arguments (state and batch) are in memory already."""
    return self.devices * (self.temporaries + max(self.outputs - self.aliased, 0))


def gb(n: float) -> str:
  for unit, size in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
    if abs(n) >= size:
      return f"{n / size:.1f} {unit}" if unit == "GB" else f"{n / size:.0f} {unit}"
  return f"{n:.0f} B"


@dataclasses.dataclass
class Remedy:
  flag: str                       # --config.<key>=<value>
  config: ml_collections.ConfigDict | None = None   # the changed config (None: same step)
  batch_scale: float = 1.0        # the batch relative to the current one
  note: str = ""


def _with(config, key: str, value):
  changed = ml_collections.ConfigDict(config.to_dict())
  section, field = key.rsplit(".", 1)
  node = changed
  for part in section.split("."):
    node = node[part]
  node[field] = value
  return changed


def remedies(config, name: str, length: int, devices: int) -> list[Remedy]:
  """The config changes that make phase `name`'s step smaller, most useful first."""
  m, out = config.model, []
  if m.get("remat", "none") == "none":
    out.append(Remedy("--config.model.remat=layer", _with(config, "model.remat", "layer"),
                      note="same values, each layer's forward pass computed twice"))
  batch = config[name].batch_size
  if batch // 2 >= devices and (batch // 2) % devices == 0:
    out.append(Remedy(f"--config.{name}.batch_size={batch // 2}", batch_scale=0.5))
  implementation, block = m.attention, m.attention_block_size
  if implementation == "auto":
    # The platform's own choice for this model, as the trainer's `platform.specialise` made it.
    choice = platform.auto_attention(transformer.from_section(m, max_length=length))
    implementation, block = choice.implementation, choice.block_size or m.attention_block_size
  if implementation == "dense" and m.dropout_rate == 0:
    out.append(Remedy("--config.model.attention=blockwise",
                      _with(config, "model.attention", "blockwise"), note="exact, memory linear in L"))
  elif implementation == "blockwise" and m.attention == "blockwise" and block > 128:
    out.append(Remedy(f"--config.model.attention_block_size={block // 2}",
                      _with(config, "model.attention_block_size", block // 2)))
  if m.dtype == "float32":
    out.append(Remedy("--config.model.dtype=bfloat16", _with(config, "model.dtype", "bfloat16"),
                      note="lower precision; no faster on CPUs without bf16 units"))
  return out


def check_step_memory(name: str, memory: StepMemory, devices, config, length: int,
                      estimate: Callable[[Remedy], StepMemory], compile_s: float) -> None:
  """Raises StepMemoryError if phase `name`'s step needs more than FIT_FRACTION of the memory
  available, listing the remedies with their estimates: `estimate(remedy)` compiles the changed step,
  as far as ESTIMATE_BUDGET_S allows (a compilation is assumed to take `compile_s`, as the first did);
  a smaller batch is otherwise estimated as linear in the batch."""
  available, what = platform.available_memory(devices)
  if available is None or memory.needed <= FIT_FRACTION * available:
    return
  limit = FIT_FRACTION * available
  lines, spent = [], 0.0
  for remedy in remedies(config, name, length, memory.devices):
    if spent + compile_s <= ESTIMATE_BUDGET_S:
      start = time.perf_counter()
      try:
        needed = estimate(remedy).needed
        value = gb(needed)
      except Exception as e:  # An estimate must not hide the error it is part of.
        needed, value = None, f"not estimated ({type(e).__name__}: {str(e)[:80]})"
      spent += time.perf_counter() - start
    elif remedy.config is None:
      needed = memory.devices * (remedy.batch_scale * memory.temporaries + max(
          memory.outputs - memory.aliased, 0))
      value = f"~{gb(needed)} (linear in the batch; not compiled)"
    else:
      needed, value = None, f"not estimated (a compilation takes {compile_s:.0f} s here)"
    verdict = "" if needed is None else (", fits" if needed <= limit else ", does not fit")
    note = f"; {remedy.note}" if remedy.note else ""
    lines.append(f"  {remedy.flag}: {value}{verdict}{note}")
  shared = f" x {memory.devices} devices" if memory.devices > 1 else ""
  raise StepMemoryError(
      f"[{name}] the train step needs {gb(memory.needed)} ({gb(memory.temporaries)} of temporaries"
      f"{shared}, beyond the {gb(memory.arguments)} of state and batch already in memory); "
      f"{gb(available)} of {what} is free, of which a step may plan on {FIT_FRACTION:.0%} "
      f"({gb(limit)}). Stopped before the "
      f"step ran. Use one or more of these, on a new --workdir (this one holds the current config); "
      f"the step's estimate with each:\n"
      + "\n".join(lines))


# ------------------------------------------------------------------------------------------ time

# A phase that would take longer than this at its measured rate gets the warning.
ETA_WARNING_S = 24 * 3600.0
# The ETA's rate is timed over this many steps after the compiled first one, or fewer where they
# take longer than ETA_PROBE_S (an LRA-size step on 2 CPU cores takes minutes).
ETA_PROBE_STEPS = 5
ETA_PROBE_S = 30.0
# What the suggested variant aims at: every phase still to run, in about this long at the measured rate.
VARIANT_TARGET_S = 2 * 3600.0


def _duration(seconds: float) -> str:
  if seconds >= 2 * 86400:
    return f"{seconds / 86400:,.0f} days"
  if seconds >= 2 * 3600:
    return f"{seconds / 3600:.0f} hours"
  return f"{seconds / 60:.0f} minutes"


def variant_command(argv: list[str], overrides: list[str], workdir: str) -> str:
  """`argv` (a main.py command) with `overrides` replacing the same keys and a new workdir; the bare
  overrides when `argv` is not main.py's."""
  keys = {o.split("=", 1)[0] for o in overrides}
  if not argv or os.path.basename(argv[0]) != "main.py":
    return " ".join(overrides) + f" (on a new workdir, e.g. {workdir})"
  kept, skip = [], False
  for arg in argv[1:]:
    if skip:
      skip = False
      continue
    key = arg.split("=", 1)[0]
    if key in keys or key == "--workdir":
      skip = "=" not in arg  # `--flag value` spelt as two words
      continue
    kept.append(arg)
  return shlex.join(["python", argv[0], *kept, f"--workdir={workdir}", *overrides])


class EtaCheck:
  """Called with the rate of the first timed steps of phase `name`; warns once, prominently, if the
  phase's remaining steps take longer than ETA_WARNING_S, with a command that runs every phase still
  to run in about VARIANT_TARGET_S at that rate. Returns the warning (None when there is none)."""

  def __init__(self, config, name: str, steps: int, workdir: str, argv=None, clock=time.time):
    self.config, self.name, self.steps, self.workdir = config, name, steps, workdir
    self.argv = sys.argv if argv is None else argv
    self.clock, self.done = clock, False

  def __call__(self, step: int, steps_per_sec: float) -> str | None:
    if self.done or steps_per_sec <= 0:
      return None
    self.done = True
    eta = (self.steps - step) / steps_per_sec
    if eta <= ETA_WARNING_S:
      return None
    names = config_lib.phase_names(self.config)
    todo = names[names.index(self.name):]
    per_phase = max(1, int(VARIANT_TARGET_S * steps_per_sec / len(todo)))
    overrides = []
    for phase in todo:
      overrides.append(f"--config.{phase}.num_steps={per_phase}")
      if self.config[phase].warmup_steps > per_phase // 10:
        overrides.append(f"--config.{phase}.warmup_steps={per_phase // 10}")
    workdir = f"{self.workdir.rstrip('/')}_{per_phase}steps"
    end = datetime.datetime.fromtimestamp(self.clock() + eta).strftime("%Y-%m-%d")
    message = (
        f"\n{'=' * 78}\n[{self.name}] at {steps_per_sec:.3g} steps/s the remaining "
        f"{self.steps - step:,} steps take ~{_duration(eta)} on this machine (until ~{end}). "
        f"A variant sized for it, every phase in about {_duration(VARIANT_TARGET_S)} "
        f"({per_phase:,} steps each):\n  "
        f"{variant_command(self.argv, overrides, workdir)}\n(README.md, Set up, has a complete "
        f"experiment sized for 2 CPU cores.)\n{'=' * 78}")
    logging.warning(message)
    return message
