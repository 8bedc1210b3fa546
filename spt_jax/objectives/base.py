"""What an objective is: the contract between an objective and the trainer (spt_jax/train.py).

Metrics are tuples of sums (by default (numerator, denominator)) so that evaluation can sum them over
batches and finish once with `summarize`: that counts every example (or masked position) exactly once
however the data is batched, padded or sharded.
Batches are dicts with `inputs` [B, L] int (pairs [B, 2, L]), `labels` [B] int and `weights` [B]
float (0 for padding examples that only fill the last evaluation batch), plus whatever `splits` adds.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp


def ratio(metrics: dict) -> dict:
  """{name: (numerator, denominator)} → {name: numerator / denominator} (jnp or numpy)."""
  return {k: n / jnp.maximum(d, 1e-12) for k, (n, d) in metrics.items()}


def higher_is_better(metric: str) -> bool:
  """Whether a larger value of validation metric `metric` is better: every metric but a loss."""
  return not metric.endswith("loss")


def predicted(logits):
  """The index of each row's first largest logit (`argmax(-1)`), as the least index holding the
  maximum: XLA:CPU runs argmax as a reduction over (value, index) pairs, several times slower than
  this max and min over the scores of a 256-way pixel head."""
  top = logits.max(-1, keepdims=True)
  index = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
  return jnp.min(jnp.where(logits == top, index, logits.shape[-1]), axis=-1)


def example_weights(batch, like):
  """[B] example weights broadcast against per-position arrays [B, ...]."""
  w = batch["weights"]
  return w.reshape(w.shape + (1,) * (like.ndim - 1))


@dataclasses.dataclass(frozen=True)
class Objective:
  """One phase's objective. Subclasses set `name` (the config value), build themselves in
  `from_config`, and implement `loss`; the rest has defaults that fit a single-loss objective.

  model            the SequenceModel (spt_jax/models/transformer.py) whose parameters it trains
  selection_metric the validation metric (of `summarize`'s) whose best value (`higher_is_better`)
                   picks the best checkpoint unless the phase's `select_on` names another
  state_key        None, or the key of the objective's own state (e.g. loss weights) in the
                   optimiser state {'model': <optax state>, state_key: <state>}: checkpointed and
                   resumed with it
  """
  name: ClassVar[str] = ""
  state_key: ClassVar[str | None] = None
  # Parameter names of heads applied to pooled features, once per example rather than per position
  # (the training compute count, spt_jax/flops.py).
  per_sequence_heads: ClassVar[tuple[str, ...]] = ("classifier",)
  # Whether `loss` is sums['loss'] numerator / denominator and `train_grads` its plain gradient:
  # then devices may each take their rows' gradient and sum them (train.flat_summed_grads).
  loss_is_ratio_of_sums: ClassVar[bool] = True
  model: Any
  selection_metric: str = "accuracy"

  # ---- config
  @staticmethod
  def config_fields() -> dict:
    """This objective's own fields of `config.<phase>` and their defaults (a value may be a nested
    ml_collections.ConfigDict): a phase is the shared fields (config_lib.phase_config) plus these."""
    return {}

  @staticmethod
  def validate(phase_config, phase: str) -> None:
    """Checks this objective's own fields of `config.<phase>`; messages name the key."""

  @classmethod
  def from_config(cls, config, phase: str, task, model_config) -> "Objective":
    raise NotImplementedError

  # ---- data and parameters
  def splits(self, task) -> dict:
    """The arrays the phase reads, per split (default: the task's)."""
    return task.splits

  def init_params(self, rng, example_inputs):
    """Fresh parameters; `example_inputs` [1, ...] has the data's shape and dtype."""
    return self.model.init(rng, example_inputs)["params"]

  def init_state(self):
    return None

  @property
  def attention_model(self):
    """The model whose attention maps can be read with this objective's parameters (None: none)."""
    return self.model

  # ---- steps (pure; traced under jit)
  def corrupted(self, batch, rng):
    """None, or the random corruption `loss` applies to `batch` for `rng`, as arrays [B, ...] (the
    masked objectives: (the positions scored, what the encoder sees)). A step that splits the batch
    over devices draws it over the whole batch first (batch['corrupted'], read by `drawn`), so that
    its numbers do not depend on the split."""
    return None

  def drawn(self, batch, rng):
    """`corrupted(batch, rng)`, or what a step drew ahead for the whole batch."""
    return batch["corrupted"] if "corrupted" in batch else self.corrupted(batch, rng)

  def loss(self, params, batch, rng, *, train: bool):
    """(scalar loss, {metric: sums})."""
    raise NotImplementedError

  def train_grads(self, params, state, batch, rng):
    """(gradients like params, new objective state, {metric: value} for the logs, per-step info or
    None). `rng` is already this step's."""
    (loss, sums), grads = jax.value_and_grad(
        lambda p: self.loss(p, batch, rng, train=True), has_aux=True)(params)
    out = self.summarize(sums)
    out["loss"] = loss
    return grads, state, out, None

  def eval_sums(self, params, batch, rng) -> dict:
    return self.loss(params, batch, rng, train=False)[1]

  def summarize(self, sums: dict) -> dict:
    return ratio(sums)

  # ---- what a phase writes beyond the common files
  def reporter(self, phase_cfg, steps: int, writer):
    """None, or an object with `after_step(step, info)` (each step's `train_grads` info) and
    `on_log(step) -> progress-bar fields or None` (at each log)."""
    return None

  def finish(self, phase: str, phase_dir: str, hooks) -> dict:
    """Extra entries of results.json; may draw figures with the caller's analysis `hooks`."""
    return {}
