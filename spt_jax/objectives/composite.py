"""Composite self-pretraining: several pretraining heads on one shared encoder output z.

Objectives (`composite.losses`, any non-empty subset, each a head under `pretrain_heads/<name>`):
  mlm          masked-token cross-entropy on i.i.d. masked positions (rate `mask_rate`)
  span         cross-entropy on contiguous masked spans (geometric lengths of mean `span_length`,
               covering about `span_rate` of the tokens)
  contrastive  InfoNCE between the mean-pooled, projected embeddings of two independently masked views
               of each sequence (temperature `temperature`; in-batch negatives)
  random       a deliberately useless loss: per-position class labels drawn from a fixed seed per
               training example index and position, independent of the tokens (pure memorisation)
  time         L1 regression of each real position's time delta, for tasks with a `time_deltas`
               field (markov_events: every delta is 1, so a bias learns it; near-useless)
GraP adds a downstream probe (`grap.probe`): a linear classifier on the pooled z ('pooled_linear') or
an MLP (hidden `grap.probe_hidden`, ReLU) on every token, whose logits averaged over the tokens classify
the sequence ('token_mlp', pretpp's downstream head without its batch norm). It is trained on the
labelled examples only, on its own loss, and supplies the downstream gradient; it never reaches the
encoder. With `grap.probe_optimizer='own'` (default) its parameters and its own Adam (`grap.probe_lr`,
constant, no warmup) are in the objective's state; with 'shared' it is the parameter
`pretrain_heads/grap_probe` under the phase's AdamW and schedule (the earlier design, and the mode
spt_jax.analysis.grap_alignment reads). Alignment in z needs the downstream gradient on the same z, so
the labelled examples are those of the current batch whose index lies in the first
`grap.label_fraction` of the training set (labels of the others are never read; a batch without any
leaves GraP's statistics, logits and probe unchanged).

How the objectives share the forward pass: ONE corrupted input (view 1) serves every head. Its mask
is the union of the mlm mask and the span mask; the mlm head is scored on the mlm positions, the span
head on the span positions, the random and time heads on every real position, the probe on the pooled
z or its tokens. The contrastive loss needs a second view: view 2 is drawn from the same corruption
distribution, independently, and encoded in a second forward pass whose output is treated as a
constant (stop gradient). So all gradients live on view 1's z [B, L, D], the space GraP aligns in, and
the encoder still gets a single backward pass. The two views are exchangeable, so the gradient
through view 2 has the same expectation as the one through view 1: dropping it halves the expected
contrastive gradient, a scale that the weighting methods normalise away.

A step (`Composite.train_grads`; spt_jax/grap.py for the weighting):
  z = encoder(view 1) with its VJP kept; z2 = encoder(view 2), a constant (contrastive only)
  for each loss i, on the detached z: L_i, dL_i/dz and head i's parameter gradient
  GraP only: the probe's loss on the labelled examples, dL_down/dz and the probe's gradient
  weighting → z-gradient (and the coefficients λ_i it applies to the raw losses, for the logs)
  ONE backward through the encoder with the z-gradient; every head gets its own UNWEIGHTED gradient
  (as the reference: a loss whose weight falls to ~0 keeps training its head, so its gradient stays
  informative and its weight can recover); the probe takes its own step ('own') or its gradient goes
  to the trainer ('shared'); the trainer's AdamW on the parameters, the weighting's state (with an
  'own' probe) updated alongside (the objective's state, in the optimiser state under 'weighting').

The head parameters are all under `pretrain_heads/`, so a fine-tuning phase loads the encoder with
`init_from.exclude=("pretrain_heads/.*",)`. Beyond the common files a composite phase writes
metrics.jsonl rows of split 'weights' every `composite.log_weights_every` steps (one column per loss,
plus `align_<loss>`, `logit_<loss>`, `coef_<loss>`, `grad_norm_<loss>`, ... for GraP) and
`<phase>/weights.png` with their trajectories (drawn by the caller's `weights_figure` hook). A GraP
phase ends by measuring the probe's validation accuracy (the final encoder and probe, on the
validation split) and writes `grap` into results.json: that accuracy, chance (the majority class),
each loss's normalised weight as the median over the last quarter of the 'weights' rows relative to
the largest, and a verdict, or "GraP not applicable (probe reads nothing)" when the probe is below
chance + 15 points (`PRECONDITION_MARGIN`): its gradient then carries no label signal, and the
weights say nothing about the losses' usefulness. Validation selects the best checkpoint on the first
loss's accuracy in ALL_LOSSES order (the mlm head's masked-token accuracy when mlm is among the losses).
"""
from __future__ import annotations

import dataclasses
import json
import os
import zlib
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import logging

from spt_jax import checkpoints, grap, masking
from spt_jax.masking import span_mask
from spt_jax.data import pipeline
from spt_jax.data.vocab import PAD_ID
from spt_jax.models.transformer import SequenceModel, pool
from spt_jax.objectives import register
from spt_jax.objectives.base import Objective, ratio
from spt_jax.objectives.masked import token_loss

LOSSES = ("mlm", "span", "contrastive", "random")   # the default composite
# Losses a task must support: `time` reads the task's `time_deltas` (markov_events).
ALL_LOSSES = LOSSES + ("time",)
TOKEN_LOSSES = ("mlm", "span")
# Useless by construction: what a weighting that judges usefulness should drive down.
USELESS = ("random", "time")
HEADS = "pretrain_heads"
PROBE = "grap_probe"
PROBES = ("pooled_linear", "token_mlp")
PROBE_OPTIMIZERS = ("own", "shared")
# GraP's precondition: a probe below chance + this margin (validation accuracy) reads nothing.
PRECONDITION_MARGIN = 0.15
NOT_APPLICABLE = "GraP not applicable (probe reads nothing)"


# ---------------------------------------------------------------------------------------- Config
def validate_phase(p, name: str) -> None:
  """Checks a composite phase's fields; every message names the offending key."""
  c, g = p.composite, p.grap
  losses = tuple(c.losses)
  if not losses or len(set(losses)) != len(losses) or set(losses) - set(ALL_LOSSES):
    raise ValueError(f"config.{name}.composite.losses={losses!r} must be distinct entries of "
                     f"{ALL_LOSSES}.")
  if c.weighting not in grap.WEIGHTINGS:
    hint = (" ('uniform' is two baselines now: 'raw_sum' sums the raw losses, 'equal_norm' weighs "
            "each loss's EMA-normalised gradient by 1)" if c.weighting == "uniform" else "")
    raise ValueError(f"config.{name}.composite.weighting={c.weighting!r} must be one of "
                     f"{grap.WEIGHTINGS}{hint}.")
  for key, allowed in (("parametrisation", grap.PARAMETRISATIONS), ("probe", PROBES),
                       ("probe_optimizer", PROBE_OPTIMIZERS)):
    if g[key] not in allowed:
      raise ValueError(f"config.{name}.grap.{key}={g[key]!r} must be one of {allowed}.")
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
            ("grap.label_fraction", 0 < g.label_fraction <= 1, "in (0, 1]"),
            ("grap.probe_lr", g.probe_lr > 0, "> 0"),
            ("grap.probe_hidden", g.probe_hidden >= 1, ">= 1"),
            ("grap.delay_steps", g.delay_steps >= 0, ">= 0")]
  for key, ok, what in checks:
    if not ok:
      raise ValueError(f"config.{name}.{key}={p[key.split('.')[0]][key.split('.')[1]]!r} must be "
                       f"{what}.")
  if "contrastive" in losses and p.batch_size < 2:
    raise ValueError(f"config.{name}.batch_size={p.batch_size} must be >= 2 for the contrastive "
                     f"loss (in-batch negatives).")


def weighting_from_config(p, probe_init=None) -> grap.Weighting:
  """The phase's weighting; `probe_init` (GraP with an 'own' probe) initialises the probe it holds."""
  c, g = p.composite, p.grap
  return grap.Weighting(
      method=c.weighting, num_losses=len(c.losses), fixed=tuple(float(w) for w in c.fixed_weights),
      logit_lr=g.logit_lr, b1=g.b1, b2=g.b2, ema=g.ema, warmup=int(g.warmup_updates),
      parametrisation=g.parametrisation, delay=int(g.delay_steps),
      probe_init=probe_init if c.weighting == "grap" and g.probe_optimizer == "own" else None,
      probe_lr=float(g.probe_lr), gradnorm_alpha=c.gradnorm_alpha, gradnorm_lr=c.gradnorm_lr)


# ---------------------------------------------------------------------------------------- Data
def prepare_splits(task, weighting: grap.Weighting, label_fraction: float, losses=()) -> dict:
  """The arrays the composite phase reads: inputs and example index everywhere; labels only when the
  weighting needs a downstream signal, and in train only for the first `label_fraction` of examples
  (the rest are zeroed with label weight 0, so they cannot leak); `time_deltas` for the time loss."""
  splits = {}
  for split, arrays in task.splits.items():
    n = pipeline.num_examples(arrays)
    out = {"inputs": arrays["inputs"], "index": np.arange(n, dtype=np.int32)}
    if "time" in losses:
      out["time_deltas"] = arrays["time_deltas"].astype(np.float32)
    if weighting.needs_downstream:
      labelled = np.ones(n, bool)
      if split == "train":
        labelled = np.arange(n) < max(1, int(round(label_fraction * n)))
      out["labels"] = np.where(labelled, arrays["labels"], 0).astype(np.int32)
      out["label_weights"] = labelled.astype(np.float32)
    splits[split] = out
  return splits


# ---------------------------------------------------------------------------------------- Targets
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


class Probe(nn.Module):
  """GraP's downstream classifier: linear on pooled z [B, D] ('pooled_linear'), or an MLP on every
  token z [B, L, D] ('token_mlp'), giving per-token logits [B, L, C]."""
  kind: str
  hidden: int
  num_classes: int

  @nn.compact
  def __call__(self, x):
    if self.kind == "token_mlp":
      x = nn.relu(nn.Dense(self.hidden, name="hidden")(x))
    return nn.Dense(self.num_classes, name="out")(x)

  def example(self, d_model: int):
    """A zero input of the shape this probe reads, to initialise it from."""
    return jnp.zeros((1, 2, d_model) if self.kind == "token_mlp" else (1, d_model), jnp.float32)


class PretrainHeads(nn.Module):
  """The heads on z, one per loss (token logits, projection or time regression), and the GraP probe
  when it is a model parameter ('shared')."""
  losses: tuple[str, ...]
  vocab_size: int
  random_classes: int
  projection_dim: int
  probe_kind: str = ""    # '' = no probe here; else Probe's kind, built as grap_probe in setup
  probe_hidden: int = 0
  num_classes: int = 0

  def setup(self):
    # Attribute names are the parameter names: pretrain_heads/{mlm,span,random,contrastive,time,
    # grap_probe}.
    if "mlm" in self.losses:
      self.mlm = nn.Dense(self.vocab_size)
    if "span" in self.losses:
      self.span = nn.Dense(self.vocab_size)
    if "random" in self.losses:
      self.random = nn.Dense(self.random_classes)
    if "contrastive" in self.losses:
      self.contrastive = Projection(self.projection_dim)
    if "time" in self.losses:
      self.time = nn.Dense(1)
    if self.probe_kind:
      self.grap_probe = Probe(self.probe_kind, self.probe_hidden, self.num_classes)

  def token_logits(self, name: str, z):
    return getattr(self, name)(z)

  def project(self, pooled):
    return self.contrastive(pooled)

  def probe_logits(self, x):
    return self.grap_probe(x)

  def __call__(self, z, pooled):
    """Touches every head (for init)."""
    out = [self.token_logits(n, z) for n in self.losses if n != "contrastive"]
    if "contrastive" in self.losses:
      out.append(self.project(pooled))
    if self.probe_kind:
      out.append(self.probe_logits(z if self.probe_kind == "token_mlp" else pooled))
    return out


# ---------------------------------------------------------------------------------------- Objective
@register
@dataclasses.dataclass(frozen=True)
class Composite(Objective):
  """Views, the shared encoding, every head's loss and the weighted step; pure functions of
  (params, batch, rng). Parameters: {'encoder': the SequenceModel's encoder, 'pretrain_heads': ...}.
  The weighting's state (GraP logits, their Adam moments, EMAs, an 'own' probe and its Adam) is the
  objective's state, kept in the optimiser state under 'weighting', so the latest checkpoint resumes
  it too."""
  name = "composite"
  state_key = "weighting"
  per_sequence_heads = ("classifier", "contrastive")  # the projection of pooled views
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
  probe_module: Probe | None = None   # GraP's probe (None: no downstream signal)
  probe_shared: bool = False          # the probe is pretrain_heads/grap_probe, not in the state
  # The validation split GraP's precondition is measured on, and its batch size (not compared: data).
  probe_val: Any = dataclasses.field(default=None, compare=False, repr=False)
  probe_val_batch: int = 32

  @staticmethod
  def config_fields() -> dict:
    return dict(
        mask_rate=0.15,             # mlm: probability that a real token is masked
        bert_mix=False,             # mlm and span: BERT's 80/10/10 replacement instead of <mask>
        composite=ml_collections.ConfigDict(dict(
            losses=LOSSES,          # subset of ALL_LOSSES, in the order weights are reported
            weighting="grap",       # one of grap.WEIGHTINGS
            fixed_weights=(),       # weighting='fixed': one weight per loss
            span_length=3.0,        # span: mean span length (geometric)
            span_rate=0.15,         # span: expected fraction of tokens inside spans
            temperature=0.1,        # contrastive: InfoNCE temperature
            projection_dim=0,       # contrastive: projection width; 0 = d_model
            random_classes=16,      # random: number of random target classes
            random_seed=0,          # random: the fixed seed of the targets
            log_weights_every=10,   # steps between rows of split 'weights' in metrics.jsonl
            gradnorm_alpha=1.5,     # weighting='gradnorm': asymmetry α
            gradnorm_lr=0.025)),    # weighting='gradnorm': Adam step on the weights
        # GraP as its authors run it (spt_jax/grap.py).
        grap=ml_collections.ConfigDict(dict(
            logit_lr=0.01, b1=0.0, b2=0.99,  # the logits' own Adam
            ema=0.9,                # EMA of the gradient norms and of the cosine statistics
            warmup_updates=10,      # plain average of the statistics over the first updates
            label_fraction=1.0,     # downstream labels come from the first fraction of train only
            parametrisation="sgd",  # 'sgd' (the reference's default): logits weigh the raw losses,
                                    # start = their plain sum; 'scaled-sgd': EMA-normalised gradients
            delay_steps=0,          # logits frozen for the first steps (statistics still accumulate)
            probe="pooled_linear",  # the downstream probe: 'pooled_linear' or 'token_mlp' (pretpp's)
            probe_hidden=128,       # probe='token_mlp': hidden width
            probe_optimizer="own",  # 'own': its own Adam at probe_lr, no warmup, in the objective
                                    # state; 'shared': a parameter under the phase's AdamW + schedule
            probe_lr=1e-2)))        # 'own': constant lr (docs/grap.md: measured against 1e-3 .. 1e-1)

  @staticmethod
  def validate(p, phase: str) -> None:
    validate_phase(p, phase)

  @classmethod
  def from_config(cls, config, phase, task, model_config):
    p = config[phase]
    if task.input_kind != "tokens" or task.splits["train"]["inputs"].ndim != 2:
      raise ValueError(f"config.{phase}.objective='composite' needs token sequences [B, L]; "
                       f"{task.name} has {task.input_kind} inputs of shape "
                       f"{task.splits['train']['inputs'].shape[1:]}.")
    c, g = p.composite, p.grap
    losses = tuple(c.losses)
    if "time" in losses and any("time_deltas" not in a for a in task.splits.values()):
      raise ValueError(f"config.{phase}.composite.losses={losses!r} has 'time', but {task.name} "
                       f"data has no time field (`time_deltas`; markov_events has one).")
    is_grap = c.weighting == "grap"
    probe = Probe(g.probe, int(g.probe_hidden), task.num_classes) if is_grap else None
    shared = is_grap and g.probe_optimizer == "shared"
    probe_rng = jax.random.fold_in(
        jax.random.PRNGKey(config.seed), zlib.crc32(f"{phase}/{PROBE}".encode()) & 0x7FFFFFFF)
    probe_init = ((lambda: probe.init(probe_rng, probe.example(model_config.d_model))["params"])
                  if is_grap and not shared else None)
    weighting = weighting_from_config(p, probe_init)
    heads = PretrainHeads(losses=losses, vocab_size=task.vocab.size,
                          random_classes=c.random_classes,
                          projection_dim=c.projection_dim or model_config.d_model,
                          probe_kind=g.probe if shared else "", probe_hidden=int(g.probe_hidden),
                          num_classes=task.num_classes)
    selection = next(f"{n}_accuracy" for n in ALL_LOSSES if n in losses)
    val = (prepare_splits(task, weighting, float(g.label_fraction), losses)["val"]
           if is_grap else None)
    return cls(SequenceModel(model_config, head="classifier"), selection_metric=selection,
               heads=heads, weighting=weighting, losses=losses,
               mask_rate=p.mask_rate, bert_mix=p.bert_mix,
               first_regular_id=task.vocab.first_regular_id, vocab_size=task.vocab.size,
               span_length=float(c.span_length), span_rate=float(c.span_rate),
               temperature=float(c.temperature), random_classes=c.random_classes,
               random_seed=c.random_seed, label_fraction=float(g.label_fraction),
               log_weights_every=int(c.log_weights_every), probe_module=probe,
               probe_shared=shared, probe_val=val,
               probe_val_batch=int(p.eval_batch_size or p.batch_size))

  @property
  def probe(self) -> bool:
    return self.probe_module is not None

  @property
  def pooling(self) -> str:
    return self.model.cfg.pooling

  @property
  def attention_model(self):
    return None  # the encoder's attention is not tracked in composite phases

  # ---- data and parameters
  def splits(self, task) -> dict:
    return prepare_splits(task, self.weighting, self.label_fraction, self.losses)

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
    # A setup without mlm or span still corrupts, with i.i.d. masking at mask_rate.
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
    if name == PROBE:
      if PROBE not in head_params:
        raise ValueError(f"This phase's GraP probe is not a parameter of {HEADS}/: with "
                         f"grap.probe_optimizer='own' it is in the optimiser state "
                         f"(opt_state['weighting']['probe'] of a latest checkpoint); pass it to "
                         f"Composite.probe_loss, or train with grap.probe_optimizer='shared'.")
      return self.probe_loss(z, mask, head_params[PROBE], views, batch)
    apply = lambda method, *args: self.heads.apply({"params": head_params}, *args, method=method)
    if name in TOKEN_LOSSES or name == "random":
      logits = apply(PretrainHeads.token_logits, name, self._per_token(z))
      if name == "random":
        targets, where = views["random_targets"], views["real"]
      else:
        targets, where = views["tokens"], views[name]
      loss, m = token_loss(logits, targets, where)
      return loss, {f"{name}_loss": m["loss"], f"{name}_accuracy": m["accuracy"]}
    if name == "time":
      pred = apply(PretrainHeads.token_logits, name, self._per_token(z))[..., 0].astype(jnp.float32)
      where = views["real"].astype(jnp.float32)
      error = jnp.abs(pred - batch["time_deltas"])
      n = where.sum()
      # "Accuracy": the delta to within half a unit, so that the checkpoint can be selected on it.
      return ((error * where).sum() / jnp.maximum(n, 1.0),
              {"time_loss": ((error * where).sum(), n),
               "time_accuracy": (((error < 0.5) * where).sum(), n)})
    pooled = pool(z, mask, self.pooling)
    valid = batch["weights"] > 0
    if name == "contrastive":
      return self._info_nce(apply(PretrainHeads.project, pooled),
                            apply(PretrainHeads.project, pool(z2, mask, self.pooling)), valid)
    raise ValueError(f"Unknown composite loss {name!r}; known: {ALL_LOSSES + (PROBE,)}.")

  def probe_loss(self, z, mask, probe_params, views: dict, batch: dict):
    """The probe's (mean loss, {metric: sums}) on the labelled examples of the batch. A token probe
    is scored on every real token (loss averaged over them) and classifies a sequence by its mean
    token logits."""
    w = batch["label_weights"] * (batch["weights"] > 0)
    n = w.sum()
    labels = batch["labels"]
    if self.probe_module.kind == "token_mlp":
      logits = self.probe_module.apply({"params": probe_params},
                                       self._per_token(z)).astype(jnp.float32)
      tokens = views["real"] * w[:, None]
      ce = optax.softmax_cross_entropy_with_integer_labels(
          logits, jnp.broadcast_to(labels[:, None], logits.shape[:2]))
      count = tokens.sum()
      sequence = (logits * tokens[..., None]).sum(1) / jnp.maximum(tokens.sum(1), 1.0)[:, None]
      correct = ((sequence.argmax(-1) == labels) * w).sum()
      return ((ce * tokens).sum() / jnp.maximum(count, 1.0),
              {f"{PROBE}_loss": ((ce * tokens).sum(), count), f"{PROBE}_accuracy": (correct, n)})
    logits = self.probe_module.apply({"params": probe_params},
                                     pool(z, mask, self.pooling)).astype(jnp.float32)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    correct = ((logits.argmax(-1) == labels) * w).sum()
    return ((ce * w).sum() / jnp.maximum(n, 1.0),
            {f"{PROBE}_loss": ((ce * w).sum(), n), f"{PROBE}_accuracy": (correct, n)})

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
    with the weighting's z-gradient; each head its own unweighted gradient; the probe its own loss's.
    Logged: `loss` = the unweighted sum of the head losses (comparable across weightings),
    `weighted_loss` = Σ λ_i L_i with the coefficients the encoder's step applies."""
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
    down_z = has_down = probe_grads = None
    if self.probe:
      probe_params = params[HEADS][PROBE] if self.probe_shared else state["probe"]
      fn = lambda z_, p: self.probe_loss(z_, mask, p, views, batch)
      (_, down_metrics), (down_z, probe_grads) = jax.value_and_grad(
          fn, argnums=(0, 1), has_aux=True)(z, probe_params)
      metrics.update(down_metrics)
      has_down = down_metrics[f"{PROBE}_loss"][1] > 0
    state, z_grad, coef, info = self.weighting(
        state, jnp.stack([r[2] for r in per_loss]), losses, down_z, has_down, weight_rng)
    if self.probe and not self.probe_shared:
      state = self.weighting.probe_step(state, probe_grads, has_down)
    (encoder_grads,) = encoder_vjp(z_grad.astype(z.dtype))
    # Head i's gradient is zero outside head i, so the sum gives every head its own, unweighted.
    head_grads = jax.tree.map(lambda *g: sum(g), *[r[3] for r in per_loss])
    if self.probe_shared:  # The probe learns from its own loss only; it never reaches the encoder.
      head_grads = dict(head_grads, **{PROBE: probe_grads})
    out = self.summarize(metrics)
    out["loss"] = losses.sum()
    out["weighted_loss"] = coef @ losses
    return {"encoder": encoder_grads, HEADS: head_grads}, state, out, info

  def eval_sums(self, params, batch, rng) -> dict:
    """The heads' metrics on a batch; the probe's too when it is a parameter ('shared')."""
    views = self.views(rng, batch)
    z, mask = self.encode(params["encoder"], views["view1"], train=False, rng=rng)
    z2 = (self.encode(params["encoder"], views["view2"], train=False, rng=rng)[0]
          if "contrastive" in self.losses else None)
    metrics = {}
    for name in self.losses + ((PROBE,) if self.probe_shared else ()):
      metrics.update(self.head_loss(name, z, mask, params[HEADS], views, batch, z2=z2)[1])
    return metrics

  def summarize(self, sums: dict) -> dict:
    return ratio(sums)

  # ---- GraP's precondition: can the probe read the label at all?
  def probe_accuracy(self, encoder_params, probe_params, arrays) -> float:
    """The probe's accuracy on `arrays` (a prepared split), through the encoder in eval mode, on
    view 1 as in training (a fixed key per batch, so the number is reproducible)."""
    def sums(encoder_params, probe_params, batch, rng):
      batch = dict(batch, inputs=batch["inputs"].astype(jnp.int32))
      views = self.views(rng, batch)
      z, mask = self.encode(encoder_params, views["view1"], train=False, rng=rng)
      return self.probe_loss(z, mask, probe_params, views, batch)[1][f"{PROBE}_accuracy"]
    step = jax.jit(sums)
    correct = total = 0.0
    for i, batch in enumerate(pipeline.eval_batches(arrays, self.probe_val_batch)):
      c, n = jax.device_get(step(encoder_params, probe_params, batch,
                                 jax.random.fold_in(jax.random.PRNGKey(0), i)))
      correct, total = correct + float(c), total + float(n)
    return correct / max(total, 1.0)

  def final_probe_accuracy(self, phase_dir: str) -> float | None:
    """The validation accuracy of the probe and encoder of the phase's newest latest checkpoint
    (None when there is none)."""
    latest = os.path.join(phase_dir, "checkpoints", checkpoints.LATEST)
    steps = sorted(int(s) for s in os.listdir(latest) if s.isdigit()) if os.path.isdir(latest) else []
    if not steps:
      return None
    step_dir = os.path.join(latest, str(steps[-1]))
    params = checkpoints.restore_item(os.path.join(step_dir, "params"))
    probe = (params[HEADS][PROBE] if self.probe_shared else
             checkpoints.restore_item(os.path.join(step_dir, "opt_state"))[self.state_key]["probe"])
    return self.probe_accuracy(params["encoder"], probe, self.probe_val)

  # ---- the weights' trajectory: metrics.jsonl rows of split 'weights' and weights.png
  def reporter(self, phase_cfg, steps: int, writer):
    return WeightsReporter(self.losses, self.log_weights_every, steps, writer)

  def finish(self, phase: str, phase_dir: str, hooks) -> dict:
    rows = read_weight_rows(phase_dir)
    figure = getattr(hooks, "weights_figure", None)
    if jax.process_index() == 0 and rows and figure is not None:
      figure(rows, self.losses, os.path.join(phase_dir, "weights.png"),
             f"{phase}: {self.weighting.method} weights")
    out = {"losses": list(self.losses), "weighting": self.weighting.method,
           "final_weights": {n: rows[-1][n] for n in self.losses} if rows else None}
    if self.probe:
      labels = self.probe_val["labels"]
      chance = float(np.bincount(labels).max() / len(labels))
      out["grap"] = grap_report(self.losses, rows, self.final_probe_accuracy(phase_dir), chance)
      logging.info("[%s] %s", phase, out["grap"]["verdict"])
    return out


def grap_report(losses, rows: list[dict], probe_accuracy: float | None, chance: float) -> dict:
  """results.json's `grap`: the precondition (the probe's validation accuracy against chance +
  PRECONDITION_MARGIN) and, when it holds, the weight verdict: each loss's normalised weight as the
  median over the last quarter of the 'weights' rows, relative to the largest; whether the useless
  losses (USELESS) are below 5% of it and every other loss keeps at least 30% (the
  redundancy test of docs/grap.md)."""
  steps = [r["step"] for r in rows]
  tail = [r for r in rows if r["step"] > 0.75 * max(steps)] if rows else []
  median = {n: float(np.median([r[n] for r in tail])) for n in losses} if tail else {}
  largest = max(median.values()) if median else 0.0
  relative = {n: v / largest for n, v in median.items()} if largest > 0 else {}
  useless = [n for n in losses if n in USELESS]
  useful = [n for n in losses if n not in USELESS]
  report = {"probe_val_accuracy": probe_accuracy, "chance": chance,
            "margin": PRECONDITION_MARGIN, "median_weight_last_quarter": median,
            "relative_weight": relative}
  if probe_accuracy is None:
    report.update(applicable=None, verdict="GraP precondition not measured (no latest checkpoint)")
    return report
  report["applicable"] = probe_accuracy >= chance + PRECONDITION_MARGIN
  if not report["applicable"]:
    report["verdict"] = (f"{NOT_APPLICABLE}: probe validation accuracy {probe_accuracy:.3f} < "
                         f"chance {chance:.3f} + {PRECONDITION_MARGIN:.2f}")
    return report
  report["useless_below_5pct"] = (all(relative[n] < 0.05 for n in useless) if useless and relative
                                  else None)
  report["useful_above_30pct"] = (all(relative[n] >= 0.3 for n in useful) if useful and relative
                                  else None)
  shares = ", ".join(f"{n} {relative[n]:.3f}" for n in losses) if relative else "no weight rows"
  report["verdict"] = (f"GraP weights (median of the last quarter, relative to the largest): "
                       f"{shares}; probe validation accuracy {probe_accuracy:.3f} (chance "
                       f"{chance:.3f})")
  return report


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
