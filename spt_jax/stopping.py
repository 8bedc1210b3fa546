"""Which validation metric a phase keeps its best checkpoint on (`config.<phase>.select_on`) and when
it stops before its cap (`config.<phase>.stop_on_plateau`).

The plateau rule, checked at every validation: the watched metric improves when it beats the best
value so far by more than `min_delta` (lower is better for a loss, higher for anything else,
objectives.base.higher_is_better); after `patience` validations in a row without an improvement the
phase stops. With `after_passing` set, validations without an improvement count only once the best
value so far has passed it (above it; below it for a loss). The cap (num_steps / num_epochs) still binds, and the learning-rate schedule is laid
over it, so a run that stops early trained exactly as the capped run did up to that step. Its state
is saved with every latest checkpoint, so a killed run resumes to the same decision at the same step.

A chance-level plateau is a plateau too: the rule cannot tell a run that never leaves chance from
one that leaves it after more than `patience` validations (docs/lra_cpu.md has such runs). Where
escapes from chance are slow, set `after_passing` a little above chance, so that a run still at
chance trains to the cap and one that has escaped stops at its plateau; or read "stopped at chance"
as "not within the patience" and run to the cap (patience 0) before calling it stuck.
"""
from __future__ import annotations

import dataclasses

from spt_jax.objectives.base import higher_is_better


def selection_metric(phase_cfg, objective) -> str:
  """The validation metric whose best value picks the phase's tested and handed-off checkpoint."""
  return phase_cfg.select_on or objective.selection_metric


def improves(value: float, best: float | None, higher: bool, min_delta: float = 0.0) -> bool:
  """Whether `value` beats `best` (None: nothing yet) by more than `min_delta`."""
  if best is None:
    return True
  return value > best + min_delta if higher else value < best - min_delta


def check_metrics(phase_cfg, phase: str, objective, reported) -> None:
  """`select_on` and `stop_on_plateau.metric` name metrics that the phase's validation `reported`
  (names), before anything trains; one error naming the key otherwise."""
  for key, value in (("select_on", phase_cfg.select_on),
                     ("stop_on_plateau.metric", phase_cfg.stop_on_plateau.metric)):
    if value and value not in reported:
      raise ValueError(f"config.{phase}.{key}={value!r} is not a validation metric of objective "
                       f"{objective.name!r}; it reports {sorted(reported)}.")


@dataclasses.dataclass
class Plateau:
  """The plateau rule's state: the watched metric's best value and step, the validations since."""
  metric: str
  patience: int
  min_delta: float
  after_passing: float | None = None  # patience counts once `best` has passed it (None: at once)
  best: float | None = None
  best_step: int | None = None
  stale: int = 0
  stopped: str | None = None  # why the phase stopped before its cap, once it has

  @classmethod
  def of(cls, phase_cfg, selection: str) -> "Plateau | None":
    """The rule of `phase_cfg.stop_on_plateau` (None when patience is 0: run to the cap)."""
    rule = phase_cfg.stop_on_plateau
    if rule.patience <= 0:
      return None
    passing = None if rule.after_passing is None else float(rule.after_passing)
    return cls(rule.metric or selection, int(rule.patience), float(rule.min_delta), passing)

  @property
  def armed(self) -> bool:
    """Whether validations without an improvement count (`after_passing` passed, or unset)."""
    if self.after_passing is None:
      return True
    return self.best is not None and improves(self.best, self.after_passing,
                                              higher_is_better(self.metric))

  def observe(self, step: int, metrics: dict) -> bool:
    """Takes one validation's metrics; True when the phase should stop at `step`."""
    value = float(metrics[self.metric])
    if improves(value, self.best, higher_is_better(self.metric), self.min_delta):
      self.best, self.best_step, self.stale = value, step, 0
      return False
    if not self.armed:
      return False
    self.stale += 1
    if self.stale >= self.patience:
      passed = "" if self.after_passing is None else f" after passing {self.after_passing:g}"
      self.stopped = (f"plateau: validation {self.metric} did not improve on {self.best:.6g} "
                      f"(step {self.best_step}) by more than {self.min_delta:g} in "
                      f"{self.patience} validation(s){passed}")
      return True
    return False

  def to_meta(self) -> dict:
    return {"metric": self.metric, "best": self.best, "best_step": self.best_step,
            "stale": self.stale, "stopped": self.stopped}

  def restore(self, meta: dict | None) -> None:
    """The state a latest checkpoint saved (a checkpoint of a run without the rule has none: the
    rule then starts over from the resumed step; one saved for another metric is refused)."""
    if not meta:
      return
    if meta["metric"] != self.metric:
      raise ValueError(f"The latest checkpoint's plateau rule watched {meta['metric']!r}, the "
                       f"config's watches {self.metric!r}; use a new --workdir.")
    self.best, self.best_step = meta["best"], meta["best_step"]
    self.stale, self.stopped = meta["stale"], meta["stopped"]
