"""The composite objective: views, the shared encoding, every loss (losses.py) and the weighted
step (spt_jax/objectives/composite/__init__.py says how they fit together)."""
from __future__ import annotations

import dataclasses
import os
import zlib
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import logging

from spt_jax import checkpoints, grap, masking
from spt_jax.data import pipeline
from spt_jax.data.vocab import PAD_ID
from spt_jax.models.transformer import SequenceModel, pool
from spt_jax.objectives import register
from spt_jax.objectives.base import Objective, ratio
from spt_jax.objectives.composite.heads import PretrainHeads, Probe
from spt_jax.objectives.composite.losses import ALL_LOSSES, PER_SEQUENCE, TABLE, TOKEN_LOSSES
from spt_jax.objectives.composite.report import WeightsReporter, grap_report, read_weight_rows

LOSSES = ("mlm", "span", "contrastive", "random")   # the default composite
HEADS = "pretrain_heads"
PROBE = "grap_probe"
PROBES = ("pooled_linear", "token_mlp")
PROBE_OPTIMIZERS = ("own", "shared")


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
  for loss in losses:
    least, why = TABLE[loss].min_batch_size
    if p.batch_size < least:
      raise ValueError(f"config.{name}.batch_size={p.batch_size} must be >= {least} for the "
                       f"{loss} loss ({why}).")


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
    for field in {f for n in losses for f in TABLE[n].batch_fields}:
      out[field] = arrays[field].astype(np.float32)
    if weighting.needs_downstream:
      labelled = np.ones(n, bool)
      if split == "train":
        labelled = np.arange(n) < max(1, int(round(label_fraction * n)))
      out["labels"] = np.where(labelled, arrays["labels"], 0).astype(np.int32)
      out["label_weights"] = labelled.astype(np.float32)
    splits[split] = out
  return splits


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
  loss_is_ratio_of_sums = False  # the weights come from whole-batch gradient alignments
  per_sequence_heads = ("classifier",) + PER_SEQUENCE
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
    for name in losses:
      for field in TABLE[name].batch_fields:
        if any(field not in a for a in task.splits.values()):
          raise ValueError(f"config.{phase}.composite.losses={losses!r} has {name!r}, but "
                           f"{task.name} data has no {name} field (`{field}`).")
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
    """One corrupted view: (inputs, {token loss: the positions it is scored on})."""
    *mask_rngs, corrupt_rng = jax.random.split(rng, len(TOKEN_LOSSES) + 1)
    none = jnp.zeros(tokens.shape, bool)
    masked = {n: TABLE[n].mask(self, r, tokens) & keep if n in self.losses else none
              for n, r in zip(TOKEN_LOSSES, mask_rngs)}
    if not any(n in self.losses for n in TOKEN_LOSSES):
      # A setup without a token loss still corrupts, with mlm's i.i.d. masking.
      masked["mlm"] = TABLE["mlm"].mask(self, mask_rngs[0], tokens) & keep
    inputs = masking.corrupt(corrupt_rng, tokens, jnp.any(jnp.stack(list(masked.values())), 0),
                             bert_mix=self.bert_mix, first_regular_id=self.first_regular_id,
                             vocab_size=self.vocab_size)
    return inputs, masked

  def views(self, rng, batch) -> dict:
    tokens = batch["inputs"]
    keep = (batch["weights"] > 0)[:, None] & (tokens != PAD_ID)
    rng1, rng2 = jax.random.split(rng)
    view1, masked = self.corrupt(rng1, tokens, keep)
    out = {"tokens": tokens, "view1": view1, "real": keep, **masked}
    for name in self.losses:
      TABLE[name].add_views(self, rng2, batch, out)
    return out

  # ---- encoder
  def encode(self, encoder_params, inputs, *, train: bool, rng):
    """(z [B, L', D], its real-position mask): the SequenceModel's own encoding."""
    return self.model.apply({"params": {"encoder": encoder_params}}, inputs, train=train,
                            rngs={"dropout": rng}, method=SequenceModel.encode)

  def per_token(self, z):
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
    apply = lambda method, *args: self.heads.apply({"params": head_params}, *args,
                                                   method=getattr(PretrainHeads, method))
    if name not in TABLE:
      raise ValueError(f"Unknown composite loss {name!r}; known: {ALL_LOSSES + (PROBE,)}.")
    return TABLE[name].loss(self, z, mask, apply, views, batch, z2)

  def loss_grads(self, name: str, z, mask, head_params, views: dict, batch: dict, *, z2=None):
    """(loss, metrics, dL/dz, dL/d head_params) of loss `name` (or the probe, PROBE) on z: the one
    per-loss gradient the step and the alignment analysis (analysis/grap_alignment.py) both take."""
    fn = lambda z_, h: self.head_loss(name, z_, mask, h, views, batch, z2=z2)
    (loss, metrics), (gz, gh) = jax.value_and_grad(fn, argnums=(0, 1), has_aux=True)(z, head_params)
    return loss, metrics, gz, gh

  def probe_loss(self, z, mask, probe_params, views: dict, batch: dict):
    """The probe's (mean loss, {metric: sums}) on the labelled examples of the batch. A token probe
    is scored on every real token (loss averaged over them) and classifies a sequence by its mean
    token logits."""
    w = batch["label_weights"] * (batch["weights"] > 0)
    n = w.sum()
    labels = batch["labels"]
    if self.probe_module.kind == "token_mlp":
      logits = self.probe_module.apply({"params": probe_params},
                                       self.per_token(z)).astype(jnp.float32)
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

  # ---- steps
  def train_grads(self, params, state, batch, rng):
    """One composite step's gradients (the module docstring): one backward through the encoder
    with the weighting's z-gradient; each head its own unweighted gradient; the probe its own loss's.
    Logged: `loss` = the unweighted sum of the head losses (comparable across weightings),
    `weighted_loss` = Σ λ_i L_i with the coefficients the encoder's step applies."""
    view_rng, drop1, drop2, weight_rng = jax.random.split(rng, 4)
    views = self.views(view_rng, batch)
    two_views = "view2" in views
    # z is computed once; its VJP is the single backward pass through the encoder.
    z, encoder_vjp, mask = jax.vjp(
        lambda p: self.encode(p, views["view1"], train=True, rng=drop1), params["encoder"],
        has_aux=True)
    z2 = (jax.lax.stop_gradient(self.encode(params["encoder"], views["view2"], train=True,
                                            rng=drop2)[0]) if two_views else None)

    per_loss = [self.loss_grads(name, z, mask, params[HEADS], views, batch, z2=z2)
                for name in self.losses]
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
          if "view2" in views else None)
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
