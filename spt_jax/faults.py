"""Named kill points, for the fault-injection tests of resumption (tests/test_fault_injection.py).

`SPT_JAX_KILL_AT=<point>[@<step>]` makes the process SIGKILL itself the first time it passes `point`
(at `step`, if given): a kill -9 at an exact place, such as between the best and the latest save of
one step, which a timer can only hit by luck. Unset (always, outside tests), a point is a dict lookup.
"""
from __future__ import annotations

import os
import signal

ENV = "SPT_JAX_KILL_AT"
POINTS = ("best_saved", "latest_saving", "plateau_stopped", "phase_finished", "test_recorded")


def _target() -> tuple[str, int | None] | None:
  spec = os.environ.get(ENV, "")
  if not spec:
    return None
  name, _, step = spec.partition("@")
  if name not in POINTS or (step and not step.isdigit()):
    raise ValueError(f"{ENV}={spec!r} must be <point>[@<step>] with point one of {POINTS}.")
  return name, int(step) if step else None


def check_environment() -> None:
  """A misspelt SPT_JAX_KILL_AT fails at start-up, not at the first point."""
  _target()


def point(name: str, step: int | None = None, *, settle=None) -> None:
  """Kills this process (SIGKILL, no clean-up of any kind) if SPT_JAX_KILL_AT names this place;
  `settle()` runs just before, e.g. to let an asynchronous save finish so the kill falls after it."""
  target = _target()
  if target is not None and target[0] == name and target[1] in (None, step):
    if settle is not None:
      settle()
    os.kill(os.getpid(), signal.SIGKILL)
