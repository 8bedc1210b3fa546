"""Pre-LayerNorm Transformer encoder and the two heads SPT needs (masked-token logits, classifier).

Parameter layout (what freezing and partial loading patterns address):
  encoder/token_embedding/embedding               (token inputs)
  encoder/input_projection/{kernel,bias}          (continuous pixel inputs: (value·(1−mask), mask))
  encoder/<the position encoding's parameters>    (models/positions.py: position_embedding for
                                                  'learned'; most encodings have none)
  encoder/layer_<i>/{norm_attention,attention/{query,key,value,out},norm_mlp,mlp/{dense_in,dense_out}}
  encoder/final_norm
  mlm_head/{kernel,bias}        or        classifier/{kernel,bias}  (classifier='linear')
                                          classifier/{hidden,output}/{kernel,bias}  ('mlp')

`remat='layer'` recomputes each encoder layer's activations in the backward pass from the layer's
input (`nn.remat`, nothing saved inside the layer): the same values and parameter paths, the step's
activation memory about one layer's instead of all layers', for a second forward pass per layer. Off
by default: accelerators usually have the memory to keep every layer's activations, and a CPU run
that does not is stopped before its first step with this among the remedies (spt_jax/preflight.py).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from spt_jax.data.vocab import CLS_ID, PAD_ID
from spt_jax.models import attention as attention_lib
from spt_jax.models import positions

# The values of config.model.position: the encodings models/positions.py declares.
POSITIONS = positions.names()
POOLINGS = ("mean", "max", "last", "cls")
HEADS = ("mlm", "classifier")
INPUT_KINDS = ("tokens", "pixels")
PAIR_FEATURES = {"uvmd": "[u, v, u*v, u-v]", "uv": "[u, v] (LRA)"}
ACTIVATIONS = {"gelu": nn.gelu, "relu": nn.relu}
# Rematerialisation: 'none' keeps every layer's activations for the backward pass, 'layer' keeps only
# each layer's input and recomputes the rest (the module docstring).
REMATS = ("none", "layer")
# Classifier heads on the pooled vector: one Dense layer, or Amos et al.'s two-layer MLP (a hidden
# layer of width d_model, then the class logits) used for Text, Image and Retrieval.
CLASSIFIERS = ("linear", "mlp")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Everything that fixes the model, declared once and passed to every module (nanodo's DoConfig).

  The fields above the line are `config.model` (config_lib.transformer_config takes its defaults
  from here and `validate_section` checks them); the ones below come from the task's data or from
  the platform (`platform.specialise`), never from the config file.
  """
  num_layers: int = 6
  d_model: int = 512
  num_heads: int = 8
  d_ff: int = 2048
  dropout_rate: float = 0.0
  position: str = "sinusoidal"    # the name of a models/positions.py encoding (`encoding`)
  pooling: str = "mean"           # one of POOLINGS
  activation: str = "gelu"
  # The encoder's compute dtype, float32 or bfloat16: its matmuls and activations. Parameters,
  # gradients and optimiser state stay float32, and so do LayerNorm's statistics, the attention
  # softmax (models/attention.py), the encoder's output, the heads and the loss.
  dtype: str = "float32"
  attention: str = "auto"         # one of attention.IMPLEMENTATIONS
  attention_block_size: int = 512
  causal: bool = False            # query i attends to keys j <= i only (a causal LM's encoder)
  remat: str = "none"             # 'layer': recompute each layer in the backward pass, for memory
  pair_features: str = "uvmd"     # retrieval head: 'uvmd' = [u, v, u*v, u-v], 'uv' = LRA's [u, v]
  classifier: str = "linear"      # 'linear' or 'mlp' (Dense(d_model), activation, Dense(classes))
  classifier_activation: str = "relu"  # the mlp head's hidden activation
  # ---- from the task's data
  vocab_size: int = 0
  max_length: int = 0
  num_classes: int = 2
  input_kind: str = "tokens"      # one of INPUT_KINDS
  pixel_mean: float = 0.0         # pixel normalisation, in 8-bit units (the data's, see TaskData)
  pixel_std: float = 255.0
  # ---- from the platform: the Dense layers' matmul (None: lax.dot_general), and how many sequences
  # blockwise attention takes per step of its loop over the batch (0: all at once)
  dot_general: Callable | None = None
  attention_sequence_chunk: int = 0

  @property
  def compute_dtype(self):
    return jnp.dtype(self.dtype)

  @property
  def encoder_length(self) -> int:
    """Positions the encoder sees: the data's plus the model's own CLS token."""
    return self.max_length + (self.pooling == "cls")

  @property
  def encoding(self) -> positions.Encoding:
    """The position encoding: what it does to the model and what it needs (models/positions.py)."""
    return positions.get(self.position)

  @property
  def grid_width(self) -> int:
    """The width of the square grid a 2d position reads the sequence as (0: a 1d position)."""
    return self.encoding.grid_width(self.max_length)

  def replace(self, **changes) -> "ModelConfig":
    return dataclasses.replace(self, **changes)


TASK_FIELDS = ("vocab_size", "max_length", "num_classes", "input_kind", "pixel_mean", "pixel_std")
PLATFORM_FIELDS = ("dot_general", "attention_sequence_chunk")
SECTION_FIELDS = tuple(f.name for f in dataclasses.fields(ModelConfig)
                       if f.name not in TASK_FIELDS + PLATFORM_FIELDS)


def section_defaults() -> dict[str, Any]:
  """`config.model`'s fields and defaults."""
  return {f.name: f.default for f in dataclasses.fields(ModelConfig) if f.name in SECTION_FIELDS}


def from_section(section, task=None, **task_fields) -> ModelConfig:
  """The ModelConfig of a `config.model` section and a task (anything with TaskData's fields).
  A section recorded before a field existed reads as the model then was: the field's default."""
  fields = {k: section.get(k, default) for k, default in section_defaults().items()}
  if task is not None:
    fields.update(vocab_size=task.vocab.size, max_length=task.max_length,
                  num_classes=task.num_classes, input_kind=task.input_kind,
                  pixel_mean=task.pixel_mean, pixel_std=task.pixel_std)
  fields.update(task_fields)
  config = ModelConfig(**fields)
  config.encoding.check_length(config.max_length)
  return config


def _one_of(value, allowed, key):
  if value not in allowed:
    raise ValueError(f"config.{key}={value!r} must be one of {tuple(allowed)}.")


def validate_section(m) -> None:
  """Checks `config.model` (before anything is built); every message names the offending key."""
  _one_of(m.position, positions.names(), "model.position")
  _one_of(m.pooling, POOLINGS, "model.pooling")
  _one_of(m.activation, tuple(ACTIVATIONS), "model.activation")
  _one_of(m.dtype, ("float32", "bfloat16"), "model.dtype")
  _one_of(m.attention, attention_lib.IMPLEMENTATIONS, "model.attention")
  _one_of(m.remat, REMATS, "model.remat")
  _one_of(m.pair_features, tuple(PAIR_FEATURES), "model.pair_features")
  _one_of(m.classifier, CLASSIFIERS, "model.classifier")
  _one_of(m.classifier_activation, tuple(ACTIVATIONS), "model.classifier_activation")
  for key in ("num_layers", "d_model", "num_heads", "d_ff"):
    if m[key] <= 0:
      raise ValueError(f"config.model.{key}={m[key]!r} must be > 0.")
  if m.d_model % m.num_heads:
    raise ValueError(f"config.model.d_model={m.d_model} is not divisible by "
                     f"config.model.num_heads={m.num_heads}.")
  positions.get(m.position).validate(m)
  if m.causal and m.pooling == "cls":
    raise ValueError("config.model.causal=True with config.model.pooling='cls': the CLS token at "
                     "position 0 would see only itself; use pooling='last' or 'mean'.")
  if not 0 <= m.dropout_rate < 1:
    raise ValueError(f"config.model.dropout_rate={m.dropout_rate} must be in [0, 1).")
  if m.dropout_rate > 0 and m.attention not in ("dense", "auto"):
    raise ValueError(f"config.model.attention={m.attention!r} has no attention dropout; use "
                     f"config.model.dropout_rate=0 or attention='dense'.")


class MLP(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, x):
    cfg = self.cfg
    dense = lambda n, name: nn.Dense(n, dtype=cfg.compute_dtype, dot_general=cfg.dot_general,
                                     name=name)
    h = ACTIVATIONS[cfg.activation](dense(cfg.d_ff, "dense_in")(x))
    return dense(x.shape[-1], "dense_out")(h)


class MLPClassifier(nn.Module):
  num_classes: int
  hidden: int
  activation: str = "relu"

  @nn.compact
  def __call__(self, x):
    h = ACTIVATIONS[self.activation](nn.Dense(self.hidden, name="hidden")(x))
    return nn.Dense(self.num_classes, name="output")(h)


def classifier_head(cfg: ModelConfig) -> nn.Module:
  """The head assigned to `classifier` (a linear one has the paths classifier/{kernel,bias})."""
  if cfg.classifier == "linear":
    return nn.Dense(cfg.num_classes)
  if cfg.classifier == "mlp":
    return MLPClassifier(cfg.num_classes, cfg.d_model, cfg.classifier_activation)
  raise ValueError(f"classifier={cfg.classifier!r} must be one of {CLASSIFIERS}.")


class EncoderBlock(nn.Module):
  cfg: ModelConfig

  # Arguments by position: nn.remat's static_argnums names `train` by its index.
  @nn.compact
  def __call__(self, x, mask, train: bool, position_params=None):
    drop = nn.Dropout(self.cfg.dropout_rate, deterministic=not train)
    h = nn.LayerNorm(name="norm_attention")(x)
    h = attention_lib.MultiHeadAttention(self.cfg, name="attention")(
        h, mask, train=train, position_params=position_params)
    x = x + drop(h)
    h = nn.LayerNorm(name="norm_mlp")(x)
    h = MLP(self.cfg, name="mlp")(h)
    return x + drop(h)


def encoder_block(remat: str):
  """The layer class for `remat`; the wrapped one keeps the module name, hence parameter paths."""
  if remat == "none":
    return EncoderBlock
  if remat == "layer":
    # Nothing inside the layer is saved: a policy that saves matmul outputs would keep the MLP's
    # [B, L, d_ff] activations, the largest of a layer's residents.
    return nn.remat(EncoderBlock, static_argnums=(3,),
                    policy=jax.checkpoint_policies.nothing_saveable)
  raise ValueError(f"remat={remat!r} must be one of {REMATS}.")


class Encoder(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, inputs, mask, *, train: bool):
    """inputs: token ids [B, L] or continuous features [B, L, C]; mask [B, L] (True = real)."""
    cfg = self.cfg
    length = inputs.shape[1]
    if length > cfg.encoder_length:
      raise ValueError(f"Sequence length {length} exceeds the model's max_length "
                       f"{cfg.encoder_length}.")
    if jnp.issubdtype(inputs.dtype, jnp.integer):
      # N(0, 1) like torch.nn.Embedding (the reference SPT code): token and sinusoidal codes then
      # have comparable scale, which is the regime the position-cancellation analysis is about.
      x = nn.Embed(cfg.vocab_size, cfg.d_model, embedding_init=nn.initializers.normal(1.0),
                   name="token_embedding")(inputs)
    else:
      x = nn.Dense(cfg.d_model, dot_general=cfg.dot_general, name="input_projection")(inputs)
    # Created once, here, so that every layer shares them (the encoding decides what they are).
    encoding = cfg.encoding
    position_params = encoding.init_params(self, cfg)
    codes = encoding.codes(cfg, position_params)
    if codes is not None:
      x = x + codes[:length]
    x = nn.Dropout(cfg.dropout_rate, deterministic=not train)(x.astype(cfg.compute_dtype))
    block = encoder_block(cfg.remat)
    for i in range(cfg.num_layers):
      x = block(cfg, name=f"layer_{i}")(x, mask, train, position_params)
    return nn.LayerNorm(name="final_norm")(x).astype(jnp.float32)


def pool(h, mask, pooling: str):
  """[B, L, D] → [B, D] over real (non-pad) positions only."""
  m = mask[..., None]
  if pooling == "mean":
    return (h * m).sum(1) / jnp.maximum(m.sum(1), 1)
  if pooling == "max":
    return jnp.where(m, h, -jnp.inf).max(1)
  if pooling == "last":
    last = jnp.maximum(mask.sum(1) - 1, 0)
    return jnp.take_along_axis(h, last[:, None, None], axis=1)[:, 0]
  if pooling == "cls":
    return h[:, 0]
  raise ValueError(f"pooling={pooling!r} must be one of {POOLINGS}.")


class SequenceModel(nn.Module):
  """The encoder and one head: `head='mlm'` gives per-position reconstruction logits,
  `'classifier'` pooled class logits; `encode` alone is what every head (composite ones too) reads.

  Inputs are token ids [B, L] (`input_kind='tokens'`; padding = id 0, excluded from attention keys and
  pooling, so appending padding never changes the outputs at real positions), raw 8-bit pixels
  [B, L] (`input_kind='pixels'`: the encoder sees (value·(1−m), m) for a corruption mask m, zeros when
  not pretraining, with value = (pixel − pixel_mean) / pixel_std; no padding), or pairs of token
  documents [B, 2, L] (retrieval: both go through the same encoder; the classifier sees
  `pair_features` of the two pooled vectors u, v).
  """
  cfg: ModelConfig
  head: str = "classifier"
  mlm_outputs: int = 0          # reconstruction logits per position; 0: vocab_size

  def setup(self):
    cfg = self.cfg
    # Attribute names are the parameter names: encoder/..., mlm_head/..., classifier/...
    self.encoder = Encoder(cfg)
    if self.head == "mlm":
      self.mlm_head = nn.Dense(self.mlm_outputs or cfg.vocab_size, dot_general=cfg.dot_general)
    elif self.head == "classifier":
      self.classifier = classifier_head(cfg)
    else:
      raise ValueError(f"head={self.head!r} must be one of {HEADS}.")

  def embed(self, inputs, pixel_mask=None):
    """The encoder's input and its real-position mask [B', L'] (pairs [B, 2, L] flattened to
    [2B, L]; the model's CLS token prepended for pooling='cls')."""
    cfg = self.cfg
    # As a JAX array: a numpy int64 batch (eager use) becomes JAX's default integer type instead of
    # asking jnp.full below for a dtype that is unavailable without x64.
    inputs = jnp.asarray(inputs).reshape(-1, inputs.shape[-1])
    if cfg.input_kind == "tokens":
      mask = inputs != PAD_ID
      if cfg.pooling == "cls":
        # The CLS token is part of the model, not the data, so the same batches serve every pooling.
        cls = jnp.full((inputs.shape[0], 1), CLS_ID, inputs.dtype)
        inputs = jnp.concatenate([cls, inputs], axis=1)
        mask = jnp.concatenate([jnp.ones_like(cls, bool), mask], axis=1)
      return inputs, mask
    if cfg.input_kind == "pixels":
      if cfg.pooling == "cls":
        raise ValueError("pooling='cls' needs token inputs; use mean or max pooling for pixels.")
      # Every pixel is real data, black included: padding is never derived from values.
      mask = jnp.ones(inputs.shape, bool)
      corrupted = (jnp.zeros(inputs.shape, jnp.float32) if pixel_mask is None
                   else pixel_mask.reshape(inputs.shape).astype(jnp.float32))
      value = (inputs.astype(jnp.float32) - cfg.pixel_mean) / cfg.pixel_std
      return jnp.stack([value * (1.0 - corrupted), corrupted], axis=-1), mask
    raise ValueError(f"input_kind={cfg.input_kind!r} must be one of {INPUT_KINDS}.")

  def encode(self, inputs, *, train: bool = False, pixel_mask=None):
    """(h [B', L', D], mask [B', L']): the encoder's output over `embed`'s positions."""
    x, mask = self.embed(inputs, pixel_mask)
    return self.encoder(x, mask, train=train), mask

  def per_token(self, h):
    """h without the model's CLS position: one row per input position."""
    return h[:, 1:] if self.cfg.pooling == "cls" else h

  def pooled(self, h, mask, batch_shape):
    """[B, D] (or the pair features [B, k·D] of documents [B, 2, L])."""
    pooled = pool(h, mask, self.cfg.pooling)
    if len(batch_shape) == 2:  # A pair of documents per example.
      pooled = pooled.reshape(batch_shape + pooled.shape[-1:])
      u, v = pooled[:, 0], pooled[:, 1]
      if self.cfg.pair_features not in PAIR_FEATURES:
        raise ValueError(f"pair_features={self.cfg.pair_features!r} must be one of "
                         f"{tuple(PAIR_FEATURES)}.")
      parts = [u, v, u * v, u - v] if self.cfg.pair_features == "uvmd" else [u, v]
      pooled = jnp.concatenate(parts, axis=-1)
    return pooled

  def __call__(self, inputs, *, train: bool = False, pixel_mask=None):
    batch_shape = inputs.shape[:-1]
    h, mask = self.encode(inputs, train=train, pixel_mask=pixel_mask)
    if self.head == "mlm":
      logits = self.per_token(self.mlm_head(h))
      return logits.reshape(batch_shape + logits.shape[1:])
    return self.classifier(self.pooled(h, mask, batch_shape))

  def with_options(self, **changes) -> "SequenceModel":
    """The same model (same parameters) with config fields changed, e.g. attention='dense'."""
    return self.clone(cfg=self.cfg.replace(**changes))


def build(head: str = "classifier", mlm_outputs: int = 0, **fields) -> SequenceModel:
  """A SequenceModel from ModelConfig's fields by keyword (tests, benchmarks, notebooks)."""
  return SequenceModel(ModelConfig(**fields), head=head, mlm_outputs=mlm_outputs)
