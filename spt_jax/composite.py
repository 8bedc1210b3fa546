"""Composite self-pretraining: several pretraining heads on one shared encoder output z.

Objectives (`composite.losses`, any non-empty subset, each a head under `pretrain_heads/<name>`):
  mlm          masked-token cross-entropy on i.i.d. masked positions (rate `mask_rate`)
  span         cross-entropy on contiguous masked spans (geometric lengths of mean `span_length`,
               covering about `span_rate` of the tokens)
  contrastive  InfoNCE between the mean-pooled, projected embeddings of two independently masked views
               of each sequence (temperature `temperature`; in-batch negatives)
  random       a deliberately useless loss: per-position class labels drawn from a fixed seed per
               training example index and position, independent of the tokens (pure memorisation)
GraP adds `pretrain_heads/grap_probe`, a linear classifier on the pooled z trained on the labelled
examples only; it supplies the downstream gradient and never reaches the encoder. Alignment in z
needs the downstream gradient on the same z, so the labelled examples are those of the current batch
whose index lies in the first `grap.label_fraction` of the training set (labels of the others are
never read; a batch without any leaves GraP's statistics and logits unchanged).

How the objectives share the forward pass: ONE corrupted input (view 1) serves every head. Its mask
is the union of the mlm mask and the span mask; the mlm head is scored on the mlm positions, the span
head on the span positions, the random head on every real position, the probe on the pooled z. The
contrastive loss needs a second view: view 2 is drawn from the same corruption distribution,
independently, and encoded in a second forward pass whose output is treated as a constant (stop
gradient). So all gradients live on view 1's z [B, L, D], the space GraP aligns in, and the encoder
still gets a single backward pass. The two views are exchangeable, so the gradient through view 2
has the same expectation as the one through view 1: dropping it halves the expected contrastive
gradient, a scale that the weighting methods normalise away.

The head parameters are all under `pretrain_heads/`, so a fine-tuning phase loads the encoder with
`init_from.exclude=("pretrain_heads/.*",)`.
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from spt_jax import grap, masking, objectives
from spt_jax.data import pipeline
from spt_jax.data.vocab import CLS_ID, PAD_ID
from spt_jax.models import transformer

LOSSES = ("mlm", "span", "contrastive", "random")
TOKEN_LOSSES = ("mlm", "span")
HEADS = "pretrain_heads"
PROBE = "grap_probe"


# ---------------------------------------------------------------------------------------- Config
def validate_phase(p, name: str) -> None:
  """Checks a composite phase's fields; every message names the offending key."""
  c, g = p.composite, p.grap
  losses = tuple(c.losses)
  if not losses or len(set(losses)) != len(losses) or set(losses) - set(LOSSES):
    raise ValueError(f"config.{name}.composite.losses={losses!r} must be distinct entries of "
                     f"{LOSSES}.")
  if c.weighting not in grap.WEIGHTINGS:
    raise ValueError(f"config.{name}.composite.weighting={c.weighting!r} must be one of "
                     f"{grap.WEIGHTINGS}.")
  if c.weighting == "fixed" and (len(c.fixed_weights) != len(losses)
                                 or any(w < 0 for w in c.fixed_weights)):
    raise ValueError(f"config.{name}.composite.fixed_weights={tuple(c.fixed_weights)!r} must give "
                     f"one non-negative weight per loss {losses}.")
  if not 0 < p.mask_rate < 1:
    raise ValueError(f"config.{name}.mask_rate={p.mask_rate} must be in (0, 1).")
  checks = [("composite.span_length", c.span_length >= 1, ">= 1"),
            ("composite.span_rate", 0 < c.span_rate < 1, "in (0, 1)"),
            ("composite.temperature", c.temperature > 0, "> 0"),
            ("composite.projection_dim", c.projection_dim >= 0, ">= 0"),
            ("composite.random_classes", c.random_classes >= 2, ">= 2"),
            ("composite.log_weights_every", c.log_weights_every > 0, "> 0"),
            ("grap.logit_lr", g.logit_lr > 0, "> 0"),
            ("grap.ema", 0 <= g.ema < 1, "in [0, 1)"),
            ("grap.b1", 0 <= g.b1 < 1, "in [0, 1)"),
            ("grap.b2", 0 <= g.b2 < 1, "in [0, 1)"),
            ("grap.warmup_updates", g.warmup_updates >= 0, ">= 0"),
            ("grap.label_fraction", 0 < g.label_fraction <= 1, "in (0, 1]")]
  for key, ok, what in checks:
    if not ok:
      raise ValueError(f"config.{name}.{key}={p[key.split('.')[0]][key.split('.')[1]]!r} must be "
                       f"{what}.")
  if "contrastive" in losses and p.batch_size < 2:
    raise ValueError(f"config.{name}.batch_size={p.batch_size} must be >= 2 for the contrastive "
                     f"loss (in-batch negatives).")


def weighting_from_config(p) -> grap.Weighting:
  c, g = p.composite, p.grap
  return grap.Weighting(
      method=c.weighting, num_losses=len(c.losses), fixed=tuple(float(w) for w in c.fixed_weights),
      logit_lr=g.logit_lr, b1=g.b1, b2=g.b2, ema=g.ema, warmup=int(g.warmup_updates),
      gradnorm_alpha=c.gradnorm_alpha, gradnorm_lr=c.gradnorm_lr)


# ---------------------------------------------------------------------------------------- Data
def prepare_splits(task, weighting: grap.Weighting, label_fraction: float) -> dict:
  """The arrays the composite phase reads: inputs and example index everywhere; labels only when the
  weighting needs a downstream signal, and in train only for the first `label_fraction` of examples
  (the rest are zeroed with label weight 0, so they cannot leak)."""
  splits = {}
  for split, arrays in task.splits.items():
    n = pipeline.num_examples(arrays)
    out = {"inputs": arrays["inputs"], "index": np.arange(n, dtype=np.int32)}
    if weighting.needs_downstream:
      labelled = np.ones(n, bool)
      if split == "train":
        labelled = np.arange(n) < max(1, int(round(label_fraction * n)))
      out["labels"] = np.where(labelled, arrays["labels"], 0).astype(np.int32)
      out["label_weights"] = labelled.astype(np.float32)
    splits[split] = out
  return splits


# ---------------------------------------------------------------------------------------- Masking
def span_mask(rng, tokens, rate: float, mean_length: float):
  """Boolean [B, L]: spans starting i.i.d. with probability rate/mean_length, geometric lengths of
  mean `mean_length`; pads never masked."""
  start_rng, length_rng = jax.random.split(rng)
  starts = jax.random.bernoulli(start_rng, rate / mean_length, tokens.shape)
  if mean_length <= 1:
    lengths = jnp.ones(tokens.shape, jnp.int32)
  else:
    u = jax.random.uniform(length_rng, tokens.shape, minval=1e-7, maxval=1.0)
    lengths = jnp.floor(jnp.log(u) / jnp.log1p(-1.0 / mean_length)).astype(jnp.int32) + 1
  positions = jnp.arange(tokens.shape[-1])
  ends = jnp.where(starts, positions + lengths, 0)
  # A position is masked when some span that starts at or before it reaches past it.
  reach = jax.lax.cummax(ends, axis=tokens.ndim - 1)
  return (reach > positions) & (tokens != PAD_ID)


def random_targets(index, length: int, classes: int, seed: int):
  """[B, L] labels that depend on (seed, example index, position) only, never on the tokens."""
  base = jax.random.PRNGKey(seed)
  draw = lambda i: jax.random.randint(jax.random.fold_in(base, i), (length,), 0, classes)
  return jax.vmap(draw)(index.astype(jnp.uint32))


# ---------------------------------------------------------------------------------------- Heads
class Projection(nn.Module):
  features: int

  @nn.compact
  def __call__(self, x):
    h = nn.gelu(nn.Dense(x.shape[-1], name="dense_in")(x))
    return nn.Dense(self.features, name="dense_out")(h)


class PretrainHeads(nn.Module):
  """The heads on z: one per loss (token logits or projection) and the optional GraP probe."""
  losses: tuple[str, ...]
  vocab_size: int
  random_classes: int
  projection_dim: int
  num_classes: int
  probe: bool

  def setup(self):
    # Attribute names are the parameter names: pretrain_heads/{mlm,span,random,contrastive,grap_probe}.
    if "mlm" in self.losses:
      self.mlm = nn.Dense(self.vocab_size)
    if "span" in self.losses:
      self.span = nn.Dense(self.vocab_size)
    if "random" in self.losses:
      self.random = nn.Dense(self.random_classes)
    if "contrastive" in self.losses:
      self.contrastive = Projection(self.projection_dim)
    if self.probe:
      self.grap_probe = nn.Dense(self.num_classes)

  def token_logits(self, name: str, z):
    return getattr(self, name)(z)

  def project(self, pooled):
    return self.contrastive(pooled)

  def probe_logits(self, pooled):
    return self.grap_probe(pooled)

  def __call__(self, z, pooled):
    """Touches every head (for init)."""
    out = [self.token_logits(n, z) for n in self.losses if n in TOKEN_LOSSES + ("random",)]
    if "contrastive" in self.losses:
      out.append(self.project(pooled))
    if self.probe:
      out.append(self.probe_logits(pooled))
    return out


# ---------------------------------------------------------------------------------------- Objective
@dataclasses.dataclass(frozen=True)
class Composite:
  """Views, the shared encoding and every head's loss; pure functions of (params, batch, rng)."""
  encoder: transformer.Encoder
  heads: PretrainHeads
  losses: tuple[str, ...]
  pooling: str
  mask_rate: float
  bert_mix: bool
  first_regular_id: int
  vocab_size: int
  span_length: float
  span_rate: float
  temperature: float
  random_classes: int
  random_seed: int

  @property
  def probe(self) -> bool:
    return self.heads.probe

  @property
  def selection_metric(self) -> str:
    """Best checkpoint: highest validation accuracy of the first token head (mlm, else span, ...)."""
    for name in ("mlm", "span", "contrastive", "random"):
      if name in self.losses:
        return f"{name}_accuracy"
    raise AssertionError(self.losses)

  def summarize(self, sums: dict) -> dict:
    return objectives.ratio(sums)

  # ---- inputs
  def corrupt(self, rng, tokens, keep):
    """One corrupted view: (inputs, mlm positions, span positions)."""
    mlm_rng, span_rng, corrupt_rng = jax.random.split(rng, 3)
    none = jnp.zeros(tokens.shape, bool)
    token_heads = [n for n in TOKEN_LOSSES if n in self.losses]
    # A contrastive-only (or random-only) setup still corrupts, with i.i.d. masking at mask_rate.
    mlm = (masking.draw_mask(mlm_rng, tokens, self.mask_rate) & keep
           if "mlm" in self.losses or not token_heads else none)
    span = (span_mask(span_rng, tokens, self.span_rate, self.span_length) & keep
            if "span" in self.losses else none)
    inputs = masking.corrupt(corrupt_rng, tokens, mlm | span, bert_mix=self.bert_mix,
                             first_regular_id=self.first_regular_id, vocab_size=self.vocab_size)
    return inputs, mlm, span

  def views(self, rng, batch) -> dict:
    tokens = batch["inputs"]
    keep = (batch["weights"] > 0)[:, None] & (tokens != PAD_ID)
    rng1, rng2 = jax.random.split(rng)
    view1, mlm, span = self.corrupt(rng1, tokens, keep)
    out = {"tokens": tokens, "view1": view1, "mlm": mlm, "span": span, "real": keep}
    if "contrastive" in self.losses:
      out["view2"] = self.corrupt(rng2, tokens, keep)[0]
    if "random" in self.losses:
      out["random_targets"] = random_targets(batch["index"], tokens.shape[1], self.random_classes,
                                             self.random_seed)
    return out

  # ---- encoder
  def encode(self, encoder_params, inputs, *, train: bool, rng):
    """z [B, L', D] and its real-position mask, exactly as SequenceModel runs its encoder."""
    mask = inputs != PAD_ID
    if self.pooling == "cls":
      cls = jnp.full((inputs.shape[0], 1), CLS_ID, inputs.dtype)
      inputs = jnp.concatenate([cls, inputs], axis=1)
      mask = jnp.concatenate([jnp.ones_like(cls, bool), mask], axis=1)
    z = self.encoder.apply({"params": encoder_params}, inputs, mask, train=train,
                           rngs={"dropout": rng})
    return z, mask

  def pool(self, z, mask):
    return transformer.pool(z, mask, self.pooling)

  def _per_token(self, z):
    return z[:, 1:] if self.pooling == "cls" else z

  # ---- losses on a (detached) z
  def loss(self, name: str, z, head_params, views: dict, batch: dict, *, z2=None):
    """(mean loss, {metric: (numerator, denominator)}) of head `name` on z."""
    apply = lambda method, *args: self.heads.apply({"params": head_params}, *args, method=method)
    if name in TOKEN_LOSSES or name == "random":
      logits = apply(PretrainHeads.token_logits, name, self._per_token(z))
      if name == "random":
        targets, where = views["random_targets"], views["real"]
      else:
        targets, where = views["tokens"], views[name]
      loss, m = objectives.MaskedTokenPrediction.loss_from_logits(logits, targets, where)
      return loss, {f"{name}_loss": m["loss"], f"{name}_accuracy": m["accuracy"]}
    mask = views["view1"] != PAD_ID
    if self.pooling == "cls":
      mask = jnp.pad(mask, ((0, 0), (1, 0)), constant_values=True)
    pooled = self.pool(z, mask)
    valid = batch["weights"] > 0
    if name == "contrastive":
      return self._info_nce(apply(PretrainHeads.project, pooled),
                            apply(PretrainHeads.project, self.pool(z2, mask)), valid)
    if name == PROBE:
      logits = apply(PretrainHeads.probe_logits, pooled).astype(jnp.float32)
      w = batch["label_weights"] * valid
      ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"])
      n = w.sum()
      correct = ((logits.argmax(-1) == batch["labels"]) * w).sum()
      return ((ce * w).sum() / jnp.maximum(n, 1.0),
              {f"{PROBE}_loss": ((ce * w).sum(), n), f"{PROBE}_accuracy": (correct, n)})
    raise ValueError(f"Unknown composite loss {name!r}; known: {LOSSES + (PROBE,)}.")

  def _info_nce(self, u, v, valid):
    """Symmetric InfoNCE between views; rows/columns of padding examples are left out."""
    u = u / jnp.maximum(jnp.linalg.norm(u, axis=-1, keepdims=True), 1e-6)
    v = v / jnp.maximum(jnp.linalg.norm(v, axis=-1, keepdims=True), 1e-6)
    sim = (u @ v.T).astype(jnp.float32) / self.temperature
    sim = jnp.where(valid[None, :] & valid[:, None], sim, -1e9)
    labels = jnp.arange(sim.shape[0])
    w = valid.astype(jnp.float32)
    ce = 0.5 * (optax.softmax_cross_entropy_with_integer_labels(sim, labels)
                + optax.softmax_cross_entropy_with_integer_labels(sim.T, labels))
    n = w.sum()
    correct = ((sim.argmax(-1) == labels) * w).sum()
    return ((ce * w).sum() / jnp.maximum(n, 1.0),
            {"contrastive_loss": ((ce * w).sum(), n), "contrastive_accuracy": (correct, n)})


def build(config, phase: str, task) -> Composite:
  """The composite objective of phase `phase` for `task` (token inputs [B, L] only)."""
  p, m = config[phase], config.model
  if task.input_kind != "tokens" or task.splits["train"]["inputs"].ndim != 2:
    raise ValueError(f"config.{phase}.objective='composite' needs token sequences [B, L]; "
                     f"{task.name} has {task.input_kind} inputs of shape "
                     f"{task.splits['train']['inputs'].shape[1:]}.")
  c = p.composite
  encoder = transformer.Encoder(
      task.vocab.size, task.max_length + (m.pooling == "cls"), m.num_layers, m.d_model,
      m.num_heads, m.d_ff, m.dropout_rate, m.position, m.activation, jnp.dtype(m.dtype),
      m.attention, m.attention_block_size, m.get("remat", "none"))
  heads = PretrainHeads(losses=tuple(c.losses), vocab_size=task.vocab.size,
                        random_classes=c.random_classes,
                        projection_dim=c.projection_dim or m.d_model,
                        num_classes=task.num_classes, probe=c.weighting == "grap")
  return Composite(encoder=encoder, heads=heads, losses=tuple(c.losses), pooling=m.pooling,
                   mask_rate=p.mask_rate, bert_mix=p.bert_mix,
                   first_regular_id=task.vocab.first_regular_id, vocab_size=task.vocab.size,
                   span_length=float(c.span_length), span_rate=float(c.span_rate),
                   temperature=float(c.temperature), random_classes=c.random_classes,
                   random_seed=c.random_seed)
