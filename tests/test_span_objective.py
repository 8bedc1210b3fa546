"""An objective owns its config fields: span masking (`objective='span'`, spt_jax/objectives/span.py),
added as one file, and a toy objective registered from outside the package, as docs/extending.md
says a new objective is added."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import load_config, tiny
from spt_jax import config_lib, experiment, masking, objectives
from spt_jax.data.vocab import PAD_ID
from spt_jax.objectives import base


def test_a_phase_has_the_shared_fields_plus_its_objectives_own():
  span, mlm, cls = (config_lib.phase_config(n) for n in ("span", "mlm", "classification"))
  assert "span_length" in span and "span_length" not in mlm and "span_length" not in cls
  assert "mask_rate" in mlm and "mask_rate" not in cls and "pixel_loss" not in cls
  assert "composite" in config_lib.phase_config("composite") and "composite" not in mlm
  shared = set(cls)
  assert set(span) - shared == {"mask_rate", "span_length", "bert_mix"}
  assert set(config_lib.phase_config("clm")) - shared == {"pixel_loss"}


def test_switching_objective_carries_shared_fields_and_drops_the_old_objectives_own():
  phase = config_lib.phase_config("mlm", learning_rate=3e-4, mask_rate=0.3, pixel_loss="ce")
  clm = config_lib.switch_objective(phase, "clm")
  assert (clm.objective, clm.learning_rate, clm.pixel_loss) == ("clm", 3e-4, "ce")
  assert "mask_rate" not in clm
  span = config_lib.switch_objective(phase, "span")
  assert (span.mask_rate, span.span_length) == (0.3, 3.0)


@pytest.mark.parametrize("key, value, match", [
    ("span_length", 0.5, r"config.pretrain.span_length=0.5 must be >= 1"),
    ("mask_rate", 1.5, r"config.pretrain.mask_rate=1.5 must be in \(0, 1\)")])
def test_bad_span_values_are_refused_naming_the_key(key, value, match):
  config = load_config("synthetic_span")
  config.pretrain[key] = value
  with pytest.raises(ValueError, match=match):
    config_lib.validate(config, 1)


def test_an_objective_without_its_fields_is_refused_before_work_starts():
  config = load_config("synthetic_spt")
  config.pretrain.objective = "span"  # an mlm phase has no span_length
  with pytest.raises(ValueError, match=r"objective='span' needs its fields \['span_length'\]"):
    config_lib.validate(config, 1)


def _runs(mask):
  """Lengths of the maximal runs of True in each row of a boolean [B, L] array."""
  lengths = []
  for row in np.asarray(mask):
    edges = np.diff(np.concatenate([[0], row.astype(int), [0]]))
    lengths += list(np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1))
  return np.array(lengths)


def test_span_masks_cover_the_rate_in_contiguous_spans_and_never_a_pad():
  tokens = jnp.full((256, 512), 7, jnp.int32).at[:, 400:].set(PAD_ID)
  span = jax.jit(masking.span_mask, static_argnums=(2, 3))(jax.random.PRNGKey(0), tokens, 0.15, 3.0)
  iid = masking.draw_mask(jax.random.PRNGKey(0), tokens, 0.15)
  assert not np.asarray(span)[:, 400:].any()
  real = np.asarray(span)[:, :400]
  # Overlapping spans merge, so coverage sits a little under the rate and runs a little over 3.
  assert 0.12 < real.mean() < 0.16
  assert 2.8 < _runs(real).mean() < 3.8
  assert _runs(np.asarray(iid)[:, :400]).mean() < 1.25


def test_span_pretraining_runs(tmp_path, cache_dir):
  # Fine-tuning from it is mlm's hand-off (same mlm_head), tested with mlm.
  config = tiny(load_config("listops_spt"), cache_dir)
  config.phases = "pretrain"
  config.pretrain = config_lib.switch_objective(config.pretrain, "span")
  config.pretrain.span_length = 2.0
  pre = experiment.run(config, str(tmp_path))["pretrain"]
  assert pre["objective"] == "span" and pre["selection_metric"] == "accuracy"
  assert 0 < pre["test_of_best"]["mask_rate"] < 1 and np.isfinite(pre["test_of_best"]["loss"])


@dataclasses.dataclass(frozen=True)
class _Toy(base.Objective):
  """A classification loss scaled by its own field: the smallest objective with an option."""
  name = "toy_scaled"
  scale: float = 1.0

  @staticmethod
  def config_fields() -> dict:
    return dict(scale=2.0)

  @staticmethod
  def validate(p, phase):
    if p.scale <= 0:
      raise ValueError(f"config.{phase}.scale={p.scale} must be > 0.")

  @classmethod
  def from_config(cls, config, phase, task, model_config):
    inner = objectives.get("classification").from_config(config, phase, task, model_config)
    return cls(inner.model, scale=config[phase].scale)

  def loss(self, params, batch, rng, *, train):
    inner = objectives.get("classification")(self.model)
    loss, sums = inner.loss(params, batch, rng, train=train)
    return self.scale * loss, sums


@pytest.fixture
def toy_registered():
  objectives.register(_Toy)
  yield
  objectives._REGISTRY.pop(_Toy.name)


def test_a_new_objective_registers_with_its_own_field_and_nothing_else_changes(toy_registered):
  phase = config_lib.phase_config("toy_scaled")
  assert phase.scale == 2.0 and "scale" not in config_lib.phase_config("classification")
  config = load_config("synthetic_spt")
  config.finetune = config_lib.switch_objective(config.finetune, "toy_scaled")
  config_lib.validate(config, 1)
  config.finetune.scale = -1.0
  with pytest.raises(ValueError, match=r"config.finetune.scale=-1.0 must be > 0"):
    config_lib.validate(config, 1)
