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

A step (`Composite.train_grads`; spt_jax/grap.py for the weighting):
  z = encoder(view 1) with its VJP kept; z2 = encoder(view 2), a constant (contrastive only)
  for each loss i, on the detached z: L_i, dL_i/dz and head i's parameter gradient
  GraP only: the probe's loss on the labelled examples and dL_down/dz
  weighting → z-gradient and per-loss coefficients λ_i
  ONE backward through the encoder with the z-gradient; heads get Σ λ_i (their gradients)
  (+ the probe its own gradient); the trainer's AdamW on everything, the weighting's state updated
  alongside (the objective's state, in the optimiser state under 'weighting').

The head parameters are all under `pretrain_heads/`, so a fine-tuning phase loads the encoder with
`init_from.exclude=("pretrain_heads/.*",)`. Beyond the common files a composite phase writes
metrics.jsonl rows of split 'weights' every `composite.log_weights_every` steps (one column per loss,
plus `align_<loss>`, `logit_<loss>`, ... for GraP) and `<phase>/weights.png` with their trajectories
(drawn by the caller's `weights_figure` hook). Validation selects the best checkpoint on the first
loss's accuracy in LOSSES order (the mlm head's masked-token accuracy when mlm is among the losses).
"""
from __future__ import annotations

import dataclasses
import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from spt_jax import grap, masking
from spt_jax.data import pipeline
from spt_jax.data.vocab import PAD_ID
from spt_jax.models.transformer import SequenceModel, pool
from spt_jax.objectives import register
from spt_jax.objectives.base import Objective, ratio
from spt_jax.objectives.masked import token_loss

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
@register
@dataclasses.dataclass(frozen=True)
class Composite(Objective):
  """Views, the shared encoding, every head's loss and the weighted step; pure functions of
  (params, batch, rng). Parameters: {'encoder': the SequenceModel's encoder, 'pretrain_heads': ...}.
  The weighting's state (GraP logits, their Adam moments, EMAs) is the objective's state, kept in the
  optimiser state under 'weighting', so the latest checkpoint resumes it too."""
  name = "composite"
  state_key = "weighting"
  heads: PretrainHeads = None
  weighting: grap.Weighting = None
  losses: tuple[str, ...] = ()
  mask_rate: float = 0.15
  bert_mix: bool = False
  first_regular_id: int = 0
  vocab_size: int = 0
  span_length: float = 3.0
  span_rate: float = 0.15
  temperature: float = 0.1
  random_classes: int = 16
  random_seed: int = 0
  label_fraction: float = 1.0
  log_weights_every: int = 10

  @staticmethod
  def validate(p, phase: str) -> None:
    if "composite" not in p or "grap" not in p:
      raise ValueError(f"config.{phase}.objective='composite' needs the fields of "
                       f"config_lib.composite_phase_config() (config.{phase}.composite, .grap).")
    validate_phase(p, phase)

  @classmethod
  def from_config(cls, config, phase, task, model_config):
    p = config[phase]
    if task.input_kind != "tokens" or task.splits["train"]["inputs"].ndim != 2:
      raise ValueError(f"config.{phase}.objective='composite' needs token sequences [B, L]; "
                       f"{task.name} has {task.input_kind} inputs of shape "
                       f"{task.splits['train']['inputs'].shape[1:]}.")
    c = p.composite
    heads = PretrainHeads(losses=tuple(c.losses), vocab_size=task.vocab.size,
                          random_classes=c.random_classes,
                          projection_dim=c.projection_dim or model_config.d_model,
                          num_classes=task.num_classes, probe=c.weighting == "grap")
    losses = tuple(c.losses)
    selection = next(f"{n}_accuracy" for n in LOSSES if n in losses)
    return cls(SequenceModel(model_config, head="classifier"), selection_metric=selection,
               heads=heads, weighting=weighting_from_config(p), losses=losses,
               mask_rate=p.mask_rate, bert_mix=p.bert_mix,
               first_regular_id=task.vocab.first_regular_id, vocab_size=task.vocab.size,
               span_length=float(c.span_length), span_rate=float(c.span_rate),
               temperature=float(c.temperature), random_classes=c.random_classes,
               random_seed=c.random_seed, label_fraction=float(p.grap.label_fraction),
               log_weights_every=int(c.log_weights_every))

  @property
  def probe(self) -> bool:
    return self.heads.probe

  @property
  def pooling(self) -> str:
    return self.model.cfg.pooling

  @property
  def attention_model(self):
    return None  # the encoder's attention is not tracked in composite phases

  # ---- data and parameters
  def splits(self, task) -> dict:
    return prepare_splits(task, self.weighting, self.label_fraction)

  def init_params(self, rng, example_inputs):
    """The encoder is drawn exactly as the classification model's (same module path and key), so
    its shapes are the fine-tune's and the same seed and phase name give the same encoder as a plain
    SPT phase."""
    length = example_inputs.shape[1]
    z = jnp.zeros((1, length + (self.pooling == "cls"), self.model.cfg.d_model), jnp.float32)
    encoder = self.model.init(rng, example_inputs)["params"]["encoder"]
    heads = self.heads.init(jax.random.fold_in(rng, 2), z, z[:, 0])["params"]
    return {"encoder": encoder, HEADS: heads}

  def init_state(self):
    return self.weighting.init()

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
    """(z [B, L', D], its real-position mask): the SequenceModel's own encoding."""
    return self.model.apply({"params": {"encoder": encoder_params}}, inputs, train=train,
                            rngs={"dropout": rng}, method=SequenceModel.encode)

  def _per_token(self, z):
    return z[:, 1:] if self.pooling == "cls" else z

  # ---- losses on a (detached) z
  def head_loss(self, name: str, z, mask, head_params, views: dict, batch: dict, *, z2=None):
    """(mean loss, {metric: (numerator, denominator)}) of head `name` on z (real positions `mask`)."""
    apply = lambda method, *args: self.heads.apply({"params": head_params}, *args, method=method)
    if name in TOKEN_LOSSES or name == "random":
      logits = apply(PretrainHeads.token_logits, name, self._per_token(z))
      if name == "random":
        targets, where = views["random_targets"], views["real"]
      else:
        targets, where = views["tokens"], views[name]
      loss, m = token_loss(logits, targets, where)
      return loss, {f"{name}_loss": m["loss"], f"{name}_accuracy": m["accuracy"]}
    pooled = pool(z, mask, self.pooling)
    valid = batch["weights"] > 0
    if name == "contrastive":
      return self._info_nce(apply(PretrainHeads.project, pooled),
                            apply(PretrainHeads.project, pool(z2, mask, self.pooling)), valid)
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

  # ---- steps
  def train_grads(self, params, state, batch, rng):
    """One composite step's gradients (the module docstring): one backward through the encoder
    with the weighting's z-gradient; each head its λ-weighted parameter gradient, the probe its own.
    Logged: `loss` = the unweighted sum of the head losses (comparable across weightings),
    `weighted_loss` = Σ λ_i L_i."""
    view_rng, drop1, drop2, weight_rng = jax.random.split(rng, 4)
    views = self.views(view_rng, batch)
    contrastive = "contrastive" in self.losses
    # z is computed once; its VJP is the single backward pass through the encoder.
    z, encoder_vjp, mask = jax.vjp(
        lambda p: self.encode(p, views["view1"], train=True, rng=drop1), params["encoder"],
        has_aux=True)
    z2 = (jax.lax.stop_gradient(self.encode(params["encoder"], views["view2"], train=True,
                                            rng=drop2)[0]) if contrastive else None)

    def head(name):
      fn = lambda z_, h: self.head_loss(name, z_, mask, h, views, batch, z2=z2)
      (loss, metrics), (gz, gh) = jax.value_and_grad(fn, argnums=(0, 1), has_aux=True)(
          z, params[HEADS])
      return loss, metrics, gz, gh

    per_loss = [head(name) for name in self.losses]
    losses = jnp.stack([r[0] for r in per_loss])
    metrics = {k: v for r in per_loss for k, v in r[1].items()}
    down_z = has_down = None
    if self.probe:
      _, down_metrics, down_z, down_heads = head(PROBE)
      metrics.update(down_metrics)
      has_down = down_metrics[f"{PROBE}_loss"][1] > 0
    state, z_grad, coef, info = self.weighting(
        state, jnp.stack([r[2] for r in per_loss]), losses, down_z, has_down, weight_rng)
    (encoder_grads,) = encoder_vjp(z_grad.astype(z.dtype))
    head_grads = jax.tree.map(lambda *g: sum(c * x for c, x in zip(coef, g)),
                              *[r[3] for r in per_loss])
    if self.probe:  # The probe learns from its own loss only; it never reaches the encoder.
      head_grads = jax.tree.map(jnp.add, head_grads, down_heads)
    out = self.summarize(metrics)
    out["loss"] = losses.sum()
    out["weighted_loss"] = coef @ losses
    return {"encoder": encoder_grads, HEADS: head_grads}, state, out, info

  def eval_sums(self, params, batch, rng) -> dict:
    views = self.views(rng, batch)
    z, mask = self.encode(params["encoder"], views["view1"], train=False, rng=rng)
    z2 = (self.encode(params["encoder"], views["view2"], train=False, rng=rng)[0]
          if "contrastive" in self.losses else None)
    metrics = {}
    for name in self.losses + ((PROBE,) if self.probe else ()):
      metrics.update(self.head_loss(name, z, mask, params[HEADS], views, batch, z2=z2)[1])
    return metrics

  def summarize(self, sums: dict) -> dict:
    return ratio(sums)

  # ---- the weights' trajectory: metrics.jsonl rows of split 'weights' and weights.png
  def reporter(self, phase_cfg, steps: int, writer):
    return WeightsReporter(self.losses, self.log_weights_every, steps, writer)

  def finish(self, phase: str, phase_dir: str, hooks) -> dict:
    rows = read_weight_rows(phase_dir)
    figure = getattr(hooks, "weights_figure", None)
    if jax.process_index() == 0 and rows and figure is not None:
      figure(rows, self.losses, os.path.join(phase_dir, "weights.png"),
             f"{phase}: {self.weighting.method} weights")
    return {"losses": list(self.losses), "weighting": self.weighting.method,
            "final_weights": {n: rows[-1][n] for n in self.losses} if rows else None}


def weight_row(losses, info) -> dict[str, float]:
  """One metrics.jsonl row of split 'weights': `<loss>` = reported weight, `<key>_<loss>` others."""
  row = {}
  for key, vector in info.items():
    for name, value in zip(losses, np.asarray(vector).reshape(-1)):
      row[name if key == "weight" else f"{key}_{name}"] = float(value)
  return row


def read_weight_rows(phase_dir: str) -> list[dict]:
  path = os.path.join(phase_dir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [r for r in map(json.loads, filter(str.strip, f)) if r.get("split") == "weights"]


class WeightsReporter:
  """Keeps every `log_every`-th step's weighting info and writes it as 'weights' rows at each log."""

  def __init__(self, losses, log_every: int, steps: int, writer):
    self.losses, self.log_every, self.steps, self.writer = losses, log_every, steps, writer
    self.pending = []

  def after_step(self, step: int, info) -> None:
    if step % self.log_every == 0 or step == self.steps:
      self.pending.append((step, info))

  def on_log(self, step: int):
    rows = [(s, weight_row(self.losses, jax.device_get(i))) for s, i in self.pending]
    self.pending.clear()
    for s, row in rows:
      self.writer.write(s, "weights", row)
    return {"w": "/".join(f"{rows[-1][1][n]:.2f}" for n in self.losses)} if rows else None
