"""Pre-LayerNorm Transformer encoder and the two heads SPT needs (masked-token logits, classifier).

Parameter layout (what freezing and partial loading patterns address):
  encoder/token_embedding/embedding               (token inputs)
  encoder/input_projection/{kernel,bias}          (continuous pixel inputs: (value·(1−mask), mask))
  encoder/position_embedding                      (only with position='learned')
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

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from spt_jax.data.vocab import CLS_ID, PAD_ID
from spt_jax.models.attention import MultiHeadAttention
from spt_jax.models.dense import Dense

POSITIONS = ("sinusoidal", "learned", "none")
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


def sinusoidal_encoding(length: int, d_model: int) -> np.ndarray:
  """Vaswani et al.'s fixed codes: sin on even channels, cos on odd ones."""
  position = np.arange(length)[:, None]
  div = np.exp(np.arange(0, d_model, 2) * (-np.log(10000.0) / d_model))
  pe = np.zeros((length, d_model), np.float32)
  pe[:, 0::2] = np.sin(position * div)
  pe[:, 1::2] = np.cos(position * div)[:, : d_model // 2]
  return pe


class MLP(nn.Module):
  d_ff: int
  activation: str = "gelu"
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x):
    h = Dense(self.d_ff, dtype=self.dtype, name="dense_in")(x)
    h = ACTIVATIONS[self.activation](h)
    return Dense(x.shape[-1], dtype=self.dtype, name="dense_out")(h)


class MLPClassifier(nn.Module):
  num_classes: int
  hidden: int
  activation: str = "relu"

  @nn.compact
  def __call__(self, x):
    h = ACTIVATIONS[self.activation](nn.Dense(self.hidden, name="hidden")(x))
    return nn.Dense(self.num_classes, name="output")(h)


def classifier_head(kind: str, num_classes: int, hidden: int, activation: str) -> nn.Module:
  """The head named 'classifier' (a linear one keeps the paths classifier/{kernel,bias})."""
  if kind == "linear":
    return nn.Dense(num_classes, name="classifier")
  if kind == "mlp":
    return MLPClassifier(num_classes, hidden, activation, name="classifier")
  raise ValueError(f"classifier={kind!r} must be one of {CLASSIFIERS}.")


class EncoderBlock(nn.Module):
  num_heads: int
  d_ff: int
  dropout_rate: float = 0.0
  activation: str = "gelu"
  dtype: jnp.dtype = jnp.float32
  attention: str = "auto"
  attention_block_size: int = 512

  @nn.compact
  def __call__(self, x, mask, train: bool):  # `train` positional: nn.remat's static_argnums
    drop = nn.Dropout(self.dropout_rate, deterministic=not train)
    h = nn.LayerNorm(name="norm_attention")(x)
    h = MultiHeadAttention(self.num_heads, self.dropout_rate, self.dtype, self.attention,
                           self.attention_block_size, name="attention")(h, mask, train=train)
    x = x + drop(h)
    h = nn.LayerNorm(name="norm_mlp")(x)
    h = MLP(self.d_ff, self.activation, self.dtype, name="mlp")(h)
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
  vocab_size: int
  max_length: int
  num_layers: int = 6
  d_model: int = 512
  num_heads: int = 8
  d_ff: int = 2048
  dropout_rate: float = 0.0
  position: str = "sinusoidal"
  activation: str = "gelu"
  dtype: jnp.dtype = jnp.float32
  attention: str = "auto"
  attention_block_size: int = 512
  remat: str = "none"

  @nn.compact
  def __call__(self, inputs, mask, *, train: bool):
    """inputs: token ids [B, L] or continuous features [B, L, C]; mask [B, L] (True = real)."""
    length = inputs.shape[1]
    if length > self.max_length:
      raise ValueError(f"Sequence length {length} exceeds the model's max_length {self.max_length}.")
    if jnp.issubdtype(inputs.dtype, jnp.integer):
      # N(0, 1) like torch.nn.Embedding (the reference SPT code): token and sinusoidal codes then
      # have comparable scale, which is the regime the position-cancellation analysis is about.
      x = nn.Embed(self.vocab_size, self.d_model, embedding_init=nn.initializers.normal(1.0),
                   name="token_embedding")(inputs)
    else:
      x = nn.Dense(self.d_model, name="input_projection")(inputs)
    if self.position == "sinusoidal":
      x = x + sinusoidal_encoding(self.max_length, self.d_model)[:length]
    elif self.position == "learned":
      table = self.param("position_embedding", nn.initializers.normal(0.02),
                         (self.max_length, self.d_model))
      x = x + table[:length]
    elif self.position != "none":
      raise ValueError(f"position={self.position!r} must be one of {POSITIONS}.")
    x = nn.Dropout(self.dropout_rate, deterministic=not train)(x.astype(self.dtype))
    block = encoder_block(self.remat)
    for i in range(self.num_layers):
      x = block(self.num_heads, self.d_ff, self.dropout_rate, self.activation, self.dtype,
                self.attention, self.attention_block_size, name=f"layer_{i}")(x, mask, train)
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
  """Encoder + one head. `head='mlm'` gives per-position reconstruction logits, `'classifier'` pooled
  class logits.

  Inputs are token ids [B, L] (`input_kind='tokens'`; padding = id 0, excluded from attention keys and
  pooling, so appending padding never changes the outputs at real positions), raw 8-bit pixels
  [B, L] (`input_kind='pixels'`: the encoder sees (value·(1−m), m) for a corruption mask m, zeros when
  not pretraining, with value = (pixel − pixel_mean) / pixel_std; no padding), or pairs of token
  documents [B, 2, L] (retrieval: both go through the same encoder; the classifier sees
  `pair_features` of the two pooled vectors u, v).
  """
  vocab_size: int
  max_length: int
  head: str = "classifier"
  num_classes: int = 2
  pooling: str = "mean"
  input_kind: str = "tokens"
  mlm_outputs: int = 0          # reconstruction logits per position; 0: vocab_size
  pair_features: str = "uvmd"
  classifier: str = "linear"
  classifier_activation: str = "relu"
  pixel_mean: float = 0.0       # pixel normalisation, in 8-bit units (the data's, see TaskData)
  pixel_std: float = 255.0
  num_layers: int = 6
  d_model: int = 512
  num_heads: int = 8
  d_ff: int = 2048
  dropout_rate: float = 0.0
  position: str = "sinusoidal"
  activation: str = "gelu"
  dtype: jnp.dtype = jnp.float32
  attention: str = "auto"
  attention_block_size: int = 512
  remat: str = "none"

  @nn.compact
  def __call__(self, inputs, *, train: bool = False, pixel_mask=None):
    batch_shape = inputs.shape[:-1]
    inputs = inputs.reshape(-1, inputs.shape[-1])  # Pairs [B, 2, L] → [2B, L]: one shared encoder.
    if self.input_kind == "tokens":
      mask = inputs != PAD_ID
      if self.pooling == "cls":
        # The CLS token is part of the model, not the data, so the same batches serve every pooling.
        cls = jnp.full((inputs.shape[0], 1), CLS_ID, inputs.dtype)
        inputs = jnp.concatenate([cls, inputs], axis=1)
        mask = jnp.concatenate([jnp.ones_like(cls, bool), mask], axis=1)
    elif self.input_kind == "pixels":
      if self.pooling == "cls":
        raise ValueError("pooling='cls' needs token inputs; use mean or max pooling for pixels.")
      # Every pixel is real data, black included: padding is never derived from values.
      mask = jnp.ones(inputs.shape, bool)
      corrupted = (jnp.zeros(inputs.shape, jnp.float32) if pixel_mask is None
                   else pixel_mask.reshape(inputs.shape).astype(jnp.float32))
      value = (inputs.astype(jnp.float32) - self.pixel_mean) / self.pixel_std
      inputs = jnp.stack([value * (1.0 - corrupted), corrupted], axis=-1)
    else:
      raise ValueError(f"input_kind={self.input_kind!r} must be one of {INPUT_KINDS}.")
    h = Encoder(self.vocab_size, self.max_length + (self.pooling == "cls"), self.num_layers,
                self.d_model, self.num_heads, self.d_ff, self.dropout_rate, self.position,
                self.activation, self.dtype, self.attention, self.attention_block_size,
                self.remat, name="encoder")(inputs, mask, train=train)
    if self.head == "mlm":
      logits = Dense(self.mlm_outputs or self.vocab_size, name="mlm_head")(h)
      if self.pooling == "cls":
        logits = logits[:, 1:]
      return logits.reshape(batch_shape + logits.shape[1:])
    if self.head == "classifier":
      pooled = pool(h, mask, self.pooling)
      if len(batch_shape) == 2:  # A pair of documents per example.
        pooled = pooled.reshape(batch_shape + pooled.shape[-1:])
        u, v = pooled[:, 0], pooled[:, 1]
        if self.pair_features not in PAIR_FEATURES:
          raise ValueError(f"pair_features={self.pair_features!r} must be one of "
                           f"{tuple(PAIR_FEATURES)}.")
        parts = [u, v, u * v, u - v] if self.pair_features == "uvmd" else [u, v]
        pooled = jnp.concatenate(parts, axis=-1)
      return classifier_head(self.classifier, self.num_classes, self.d_model,
                             self.classifier_activation)(pooled)
    raise ValueError(f"head={self.head!r} must be one of {HEADS}.")
