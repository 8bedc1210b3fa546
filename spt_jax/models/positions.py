"""Position encodings (`config.model.position`), each declared once here and looked up by name.

An encoding can act in three places, and its class says which by the methods it overrides:
  input    `codes`: codes added to the encoder's input embeddings (sinusoidal, learned).
  q and k  `rotate`: each head's queries and keys turned by their positions before any attention
           implementation sees them (rope, rope2d).
  scores   `score_rule`: a bias on the attention scores as a function of the query's and the key's
           positions (alibi, alibi2d; t5_relative, with parameters), which every implementation in
           models/attention.py applies to each score tile from the tile's own positions
           (`attention.ScoreModifier`), so none of them builds an L×L bias. A rule with parameters
           (`learned_bias`) is differentiated per tile as well, blockwise attention's recomputing
           backward included.
Its parameters (`parameters`) live in the encoder's scope, `encoder/<name>`, where the encoder
creates them once and hands them to every layer.

The rest of spt_jax never compares the name: it asks the encoding (`get(name)`, or a ModelConfig's
`encoding`) for what it does and for these flags:
  length_bound       a parameter is sized by the encoder's length: the model cannot run past
                     max_length, and a checkpoint transfers only between equal lengths.
  fused_kernel       cuDNN's fused attention runs it as it is (its scores need no L×L bias operand),
                     so attention='auto' may choose cuDNN (spt_jax/platform.py).
  d_model_multiple, head_dim_multiple   what its codes or rotation need of the shapes.
  grid               it reads a sequence of L = w² positions as a w × w image, row by row: the data
                     length must be a square and there is no place for a CLS token.

A new encoding is one class here with `@register` (docs/extending.md). The style follows big_vision's
`get_posemb` and flax's lm1b `AddPositionEmbs`: the encoding is a value the model consults, not a
branch in the model.
"""
from __future__ import annotations

import math
from typing import Any, ClassVar

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from spt_jax.models import attention

_REGISTRY: dict[str, "Encoding"] = {}


def register(cls):
  """Class decorator: makes `cls.name` a value of config.model.position."""
  if cls.name in _REGISTRY:
    raise ValueError(f"position encoding {cls.name!r} is registered twice.")
  _REGISTRY[cls.name] = cls()
  return cls


def names() -> tuple[str, ...]:
  """The values config.model.position takes, in the order they were declared."""
  return tuple(_REGISTRY)


def get(name: str) -> "Encoding":
  """The encoding called `name`; an unknown name is a ValueError that lists the known ones."""
  try:
    return _REGISTRY[name]
  except KeyError:
    raise ValueError(f"config.model.position={name!r} must be one of {names()}.") from None


class Encoding:
  """What one position encoding does to the model; the defaults do nothing. Stateless: everything
  a method needs comes from the ModelConfig `cfg` and the encoding's own parameters `params`
  ({name: array}, the ones `parameters` declares)."""
  name: ClassVar[str]
  title: ClassVar[str]              # how messages and figures name it
  length_bound: ClassVar[bool] = False
  fused_kernel: ClassVar[bool] = True
  d_model_multiple: ClassVar[int] = 1
  head_dim_multiple: ClassVar[int] = 1
  head_dim_reason: ClassVar[str] = ""   # what it does that needs head_dim_multiple, for the message
  grid: ClassVar[bool] = False

  def parameters(self, cfg) -> dict[str, tuple[tuple[int, ...], Any]]:
    """{name: (shape, initializer)} of the parameters it owns, `encoder/<name>`."""
    return {}

  def codes(self, cfg, params):
    """[encoder_length, d_model] codes added to the encoder's input, or None."""
    return None

  def rotate(self, q, k, cfg):
    """(q, k) [B, L, H, D] as attention sees them."""
    return q, k

  def score_rule(self, cfg, params) -> dict[str, Any]:
    """The position part of `attention.ScoreModifier`'s fields (not `causal`, the model's own)."""
    return {}

  # ---- read off the methods an encoding overrides, so that they cannot contradict what it does

  @property
  def adds_codes(self) -> bool:
    """It adds codes to the input: the analysis shows them through W_Q and W_K."""
    return type(self).codes is not Encoding.codes

  @property
  def in_attention(self) -> bool:
    """It acts inside attention (rotates q and k, or biases the scores): the analysis shows it by
    the attention logits per offset."""
    return (type(self).rotate is not Encoding.rotate
            or type(self).score_rule is not Encoding.score_rule)

  def grid_width(self, max_length: int) -> int:
    """The width of the square grid it reads the data as (0: a 1d encoding)."""
    return math.isqrt(max_length) if self.grid else 0

  def init_params(self, module: nn.Module, cfg) -> dict[str, jax.Array]:
    """Its parameters, created in `module`'s scope (the encoder's, inside its compact call)."""
    return {name: module.param(name, init, shape)
            for name, (shape, init) in self.parameters(cfg).items()}

  def saved_params(self, cfg, encoder_params) -> dict[str, Any]:
    """Its parameters from a trained model's `params['encoder']` (the analysis reads these)."""
    return {name: encoder_params[name] for name in self.parameters(cfg)}

  # ---- checks

  def validate(self, m) -> None:
    """Checks config.model section `m` against what the encoding needs; each message names keys."""
    if m.d_model % self.d_model_multiple:
      raise ValueError(f"config.model.d_model={m.d_model} must be a multiple of "
                       f"{self.d_model_multiple} for {self.name} positions.")
    head_dim = m.d_model // m.num_heads
    if head_dim % self.head_dim_multiple:
      raise ValueError(f"config.model.position={m.position!r} {self.head_dim_reason}: the head "
                       f"dimension config.model.d_model / config.model.num_heads = {head_dim} "
                       f"must be a multiple of {self.head_dim_multiple}.")
    if self.grid and m.pooling == "cls":
      raise ValueError(f"config.model.position={m.position!r} reads the positions as an image "
                       f"grid, where a CLS token has no place; use pooling='mean' or 'max'.")

  def check_length(self, max_length: int) -> None:
    """Checks the data's length once it is known (when the model is built)."""
    if self.grid and max_length and math.isqrt(max_length) ** 2 != max_length:
      raise ValueError(f"config.model.position={self.name!r} reads a sequence as a square image, "
                       f"but the data's length is {max_length}, not a square.")


# ------------------------------------------------------------------------------------ the input


def sinusoidal_encoding(length: int, d_model: int) -> np.ndarray:
  """Vaswani et al.'s fixed codes: sin on even channels, cos on odd ones."""
  position = np.arange(length)[:, None]
  div = np.exp(np.arange(0, d_model, 2) * (-np.log(10000.0) / d_model))
  pe = np.zeros((length, d_model), np.float32)
  pe[:, 0::2] = np.sin(position * div)
  pe[:, 1::2] = np.cos(position * div)[:, : d_model // 2]
  return pe


@register
class Sinusoidal(Encoding):
  """The default, Amos et al.'s: fixed codes added to the input."""
  name, title = "sinusoidal", "sinusoidal"
  d_model_multiple = 2  # sin and cos channels in pairs

  def codes(self, cfg, params):
    return sinusoidal_encoding(cfg.encoder_length, cfg.d_model)


@register
class Learned(Encoding):
  """A trained table added to the input, one row per position of the encoder's length."""
  name, title = "learned", "learned"
  length_bound = True

  def parameters(self, cfg):
    return {"position_embedding": ((cfg.encoder_length, cfg.d_model),
                                   nn.initializers.normal(0.02))}

  def codes(self, cfg, params):
    return params["position_embedding"]


@register
class NoPositions(Encoding):
  """No positions: the encoder is permutation-equivariant."""
  name, title = "none", "no positions"


# ------------------------------------------------------------------------------ inside attention


@register
class Rope(Encoding):
  """RoPE (Su et al.): q and k turned by their positions, `attention.rotary`."""
  name, title = "rope", "RoPE"
  head_dim_multiple = 2
  head_dim_reason = "rotates channel pairs"

  def rotate(self, q, k, cfg):
    width = self.grid_width(cfg.max_length)
    return attention.rotary(q, width), attention.rotary(k, width)


@register
class Alibi(Encoding):
  """ALiBi (Press et al.): −m_h·|i − j| on the scores, `attention.ScoreModifier`."""
  name, title = "alibi", "ALiBi"
  fused_kernel = False  # cuDNN would take the bias as an L×L operand

  def score_rule(self, cfg, params):
    return dict(alibi=attention.alibi_slopes(cfg.num_heads),
                grid_width=self.grid_width(cfg.max_length))


# -------------------------------------------------------------------------- on an image's grid


@register
class Rope2d(Rope):
  """Axial RoPE on an image read row by row: half of each head's channels turned by the row, half by
  the column."""
  name, title = "rope2d", "axial RoPE"
  head_dim_multiple = 4
  head_dim_reason = "rotates channel pairs (half by row, half by column)"
  grid = True


@register
class Alibi2d(Alibi):
  """ALiBi by the Euclidean distance of two pixels on an image's grid."""
  name, title = "alibi2d", "2D ALiBi"
  grid = True


# ---------------------------------------------------------------------- a learned bias on scores


def relative_position_bucket(relative, *, bidirectional: bool = True, num_buckets: int = 32,
                             max_distance: int = 128) -> jax.Array:
  """T5's bucket of each offset `relative` = key position − query position (Raffel et al. 2020;
  the rule of t5x's and Mesh TensorFlow's `_relative_position_bucket`), int32 in [0, num_buckets).

  Bidirectional: half the buckets for keys after the query, half for keys at or before it. Within a
  half, offsets below max_exact = half // 2 have a bucket each, and longer ones share buckets
  log-spaced up to `max_distance`, beyond which every offset is in the last bucket: near keys are
  told apart, far ones only roughly, and any length runs (no table row per position). Not
  bidirectional (a causal model): every bucket for keys at or before the query, a later key's offset
  reading as 0. float32 logarithms as in the reference, so a bucket boundary falls where it does
  there.
  """
  n = -jnp.asarray(relative, jnp.int32)
  bucket = jnp.zeros_like(n)
  if bidirectional:
    num_buckets //= 2
    bucket = bucket + (n < 0).astype(jnp.int32) * num_buckets
    n = jnp.abs(n)
  else:
    n = jnp.maximum(n, 0)
  max_exact = num_buckets // 2
  # eps: log(0) for the offsets below max_exact, which `where` then discards, stays finite.
  log_ratio = jnp.log(n.astype(jnp.float32) / max_exact + np.finfo(np.float32).eps)
  large = max_exact + (log_ratio / np.float32(np.log(max_distance / max_exact))
                       * (num_buckets - max_exact)).astype(jnp.int32)
  large = jnp.minimum(large, num_buckets - 1)
  return bucket + jnp.where(n < max_exact, n, large)


@flax.struct.dataclass
class BucketBias:
  """A learned scalar per head and bucket of the key-minus-query offset (T5's relative attention
  bias), as `attention.ScoreModifier.learned_bias`: a pytree whose one leaf is the table."""
  table: jax.Array                                          # [H, num_buckets]
  num_buckets: int = flax.struct.field(pytree_node=False, default=32)
  max_distance: int = flax.struct.field(pytree_node=False, default=128)
  bidirectional: bool = flax.struct.field(pytree_node=False, default=True)

  def __call__(self, q_pos, k_pos) -> jax.Array:
    """float32 [..., H, cq, ck] for positions q_pos [..., cq] and k_pos [..., ck]."""
    bucket = relative_position_bucket(k_pos[..., None, :] - q_pos[..., :, None],
                                      bidirectional=self.bidirectional,
                                      num_buckets=self.num_buckets, max_distance=self.max_distance)
    # A gather: its gradient is the scatter-add of the scores' cotangent into the table.
    return jnp.moveaxis(self.table.astype(jnp.float32)[:, bucket], 0, -3)


@register
class T5Relative(Encoding):
  """T5's relative position buckets (Raffel et al. 2020): a learned per-head bias on the scores for
  each bucket of the key-minus-query offset (`relative_position_bucket`), 32 buckets up to a
  distance of 128 as in T5; bidirectional, or one-sided in a causal model as in T5's decoder.

  One table, `encoder/relative_position_bias` [num_heads, num_buckets], shared by every layer: T5's
  choice (its first layer's table serves them all), which keeps the parameter count at
  num_heads × 32 whatever the depth. Initialised as t5x initialises it (variance scaling, fan_avg,
  uniform), so the model starts with small random offsets' biases rather than none.
  """
  name, title = "t5_relative", "T5's relative position bias"
  fused_kernel = False  # cuDNN would take the bias as an L×L operand
  num_buckets, max_distance = 32, 128

  def parameters(self, cfg):
    return {"relative_position_bias": (
        (cfg.num_heads, self.num_buckets),
        nn.initializers.variance_scaling(1.0, "fan_avg", "uniform"))}

  def score_rule(self, cfg, params):
    return dict(learned_bias=BucketBias(params["relative_position_bias"], self.num_buckets,
                                        self.max_distance, bidirectional=not cfg.causal))
