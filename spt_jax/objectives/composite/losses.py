"""The composite objective's losses, one class each, looked up by name (`composite.losses`).

A loss declares its head (built under `pretrain_heads/<name>`), what it needs from the batch and
the views, and its loss on the shared encoder output z. The objective (objective.py) never branches
on a loss's name: adding a loss is one class here and its entry in TABLE.
"""
from __future__ import annotations

from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from spt_jax import masking
from spt_jax.models.transformer import pool
from spt_jax.objectives.masked import token_loss


def random_targets(index, length: int, classes: int, seed: int):
  """[B, L] labels that depend on (seed, example index, position) only, never on the tokens."""
  base = jax.random.PRNGKey(seed)
  draw = lambda i: jax.random.randint(jax.random.fold_in(base, i), (length,), 0, classes)
  return jax.vmap(draw)(index.astype(jnp.uint32))


class Projection(nn.Module):
  features: int

  @nn.compact
  def __call__(self, x):
    h = nn.gelu(nn.Dense(x.shape[-1], name="dense_in")(x))
    return nn.Dense(self.features, name="dense_out")(h)


class Loss:
  """One composite loss. `comp` below is the Composite objective (its per-loss options, pooling,
  heads); `apply(method, *args)` runs a PretrainHeads method with the phase's head parameters."""
  name: ClassVar[str] = ""
  masks_tokens: ClassVar[bool] = False  # scored on positions it masks in view 1 (`mask`)
  per_sequence: ClassVar[bool] = False  # its head reads pooled z, once per example (FLOPs count)
  useless: ClassVar[bool] = False       # carries no information about the data, by construction
  batch_fields: ClassVar[tuple[str, ...]] = ()  # per-example arrays the task must provide
  min_batch_size: ClassVar[tuple[int, str]] = (1, "")  # the least batch it works on, and why

  @staticmethod
  def head(heads) -> nn.Module:
    """Its head, built in PretrainHeads.setup (`heads` holds the widths)."""
    raise NotImplementedError

  @staticmethod
  def mask(comp, rng, tokens):
    """masks_tokens only: the positions it masks and is scored on, [B, L] bool."""
    raise NotImplementedError

  @staticmethod
  def add_views(comp, rng, batch, views: dict) -> None:
    """Adds what its loss reads beyond view 1 (`rng`: the second view's key)."""

  @staticmethod
  def loss(comp, z, mask, apply, views: dict, batch: dict, z2):
    """(mean loss, {metric: (numerator, denominator)}) on z [B, L', D] (real positions `mask`)."""
    raise NotImplementedError


def _scored_tokens(name: str, comp, z, apply, targets, where):
  logits = apply("token_logits", name, comp.per_token(z))
  loss, m = token_loss(logits, targets, where)
  return loss, {f"{name}_loss": m["loss"], f"{name}_accuracy": m["accuracy"]}


class _MaskedTokens(Loss):
  """Cross-entropy of the vocabulary head on the positions this loss masked in view 1."""
  masks_tokens = True

  @staticmethod
  def head(heads):
    return nn.Dense(heads.vocab_size)

  @classmethod
  def loss(cls, comp, z, mask, apply, views, batch, z2):
    return _scored_tokens(cls.name, comp, z, apply, views["tokens"], views[cls.name])


class Mlm(_MaskedTokens):
  """Masked-token cross-entropy on i.i.d. masked positions (rate `mask_rate`)."""
  name = "mlm"

  @staticmethod
  def mask(comp, rng, tokens):
    return masking.draw_mask(rng, tokens, comp.mask_rate)


class Span(_MaskedTokens):
  """Cross-entropy on contiguous masked spans (geometric lengths of mean `span_length`, covering
  about `span_rate` of the tokens)."""
  name = "span"

  @staticmethod
  def mask(comp, rng, tokens):
    return masking.span_mask(rng, tokens, comp.span_rate, comp.span_length)


class Contrastive(Loss):
  """Symmetric InfoNCE between the pooled, projected embeddings of two independently masked views of
  each sequence (in-batch negatives, `temperature`); rows and columns of padding examples are left
  out."""
  name = "contrastive"
  per_sequence = True
  min_batch_size = (2, "in-batch negatives")

  @staticmethod
  def head(heads):
    return Projection(heads.projection_dim)

  @staticmethod
  def add_views(comp, rng, batch, views):
    views["view2"] = comp.corrupt(rng, views["tokens"], views["real"])[0]

  @staticmethod
  def loss(comp, z, mask, apply, views, batch, z2):
    valid = batch["weights"] > 0
    u = apply("sequence_head", "contrastive", pool(z, mask, comp.pooling))
    v = apply("sequence_head", "contrastive", pool(z2, mask, comp.pooling))
    u = u / jnp.maximum(jnp.linalg.norm(u, axis=-1, keepdims=True), 1e-6)
    v = v / jnp.maximum(jnp.linalg.norm(v, axis=-1, keepdims=True), 1e-6)
    sim = (u @ v.T).astype(jnp.float32) / comp.temperature
    sim = jnp.where(valid[None, :] & valid[:, None], sim, -1e9)
    labels = jnp.arange(sim.shape[0])
    w = valid.astype(jnp.float32)
    ce = 0.5 * (optax.softmax_cross_entropy_with_integer_labels(sim, labels)
                + optax.softmax_cross_entropy_with_integer_labels(sim.T, labels))
    n = w.sum()
    correct = ((sim.argmax(-1) == labels) * w).sum()
    return ((ce * w).sum() / jnp.maximum(n, 1.0),
            {"contrastive_loss": ((ce * w).sum(), n), "contrastive_accuracy": (correct, n)})


class Random(Loss):
  """A deliberately useless loss: per-position class labels drawn from a fixed seed per training
  example index and position, independent of the tokens (pure memorisation)."""
  name = "random"
  useless = True

  @staticmethod
  def head(heads):
    return nn.Dense(heads.random_classes)

  @staticmethod
  def add_views(comp, rng, batch, views):
    views["random_targets"] = random_targets(batch["index"], views["tokens"].shape[1],
                                             comp.random_classes, comp.random_seed)

  @staticmethod
  def loss(comp, z, mask, apply, views, batch, z2):
    return _scored_tokens("random", comp, z, apply, views["random_targets"], views["real"])


class Time(Loss):
  """L1 regression of each real position's time delta, for tasks with a `time_deltas` field
  (markov_events: every delta is 1, so a bias learns it; near-useless)."""
  name = "time"
  useless = True
  batch_fields = ("time_deltas",)

  @staticmethod
  def head(heads):
    return nn.Dense(1)

  @staticmethod
  def loss(comp, z, mask, apply, views, batch, z2):
    pred = apply("token_logits", "time", comp.per_token(z))[..., 0].astype(jnp.float32)
    where = views["real"].astype(jnp.float32)
    error = jnp.abs(pred - batch["time_deltas"])
    n = where.sum()
    # "Accuracy": the delta to within half a unit, so that the checkpoint can be selected on it.
    return ((error * where).sum() / jnp.maximum(n, 1.0),
            {"time_loss": ((error * where).sum(), n),
             "time_accuracy": (((error < 0.5) * where).sum(), n)})


# In this order: parameter names, the order validation's selection metric is looked up in.
TABLE: dict[str, type[Loss]] = {c.name: c for c in (Mlm, Span, Contrastive, Random, Time)}
ALL_LOSSES = tuple(TABLE)
TOKEN_LOSSES = tuple(n for n, c in TABLE.items() if c.masks_tokens)
USELESS = tuple(n for n, c in TABLE.items() if c.useless)
PER_SEQUENCE = tuple(n for n, c in TABLE.items() if c.per_sequence)
