"""Multi-head self-attention whose projections are separate, addressable parameter subtrees.

`query`, `key`, `value` and `out` are their own Dense modules so that W_Q and W_K can be frozen, loaded
or inspected by path (`.../attention/query/kernel`), which the mechanism ablations depend on.

The attention itself is chosen by name (`IMPLEMENTATIONS`), all with one signature:
  dense      softmax(q kᵀ/√d) v, the L×L weights materialised (and returned for analysis).
  blockwise  the same numbers computed flash-attention style over blocks of `block_size`, in memory
             linear in L in the forward and the backward pass (custom VJP that recomputes); a
             sequence taken as one block whose scores fit KEPT_PROBABILITIES_MAX_BYTES keeps its
             probabilities for the backward instead.
  local      each block of `block_size` queries attends to its own and the two neighbouring key
             blocks only (Amos et al.'s Path-X setting): a different model, linear in L.
  cudnn      cuDNN's fused flash attention via `jax.nn.dot_product_attention`; GPU only.
  auto       (the default) the fastest exact one, chosen once when the trainer builds the model
             (`platform.specialise`: cuDNN on a CUDA GPU where it supports the case, blockwise on the
             CPU backend from `platform.AUTO_CPU_MIN_LENGTH` tokens on, dense otherwise and whenever
             attention dropout is active); a model built without the platform's choice runs dense.
             The same function either way, so checkpoints and results do not depend on which one ran.
Only `dense` supports dropout on the attention weights and returns the weights.

Precision: q, k, v come in the compute dtype (`model.dtype`); every implementation computes the scores
and their softmax in float32 (dense and local accumulate q·kᵀ in float32, blockwise keeps float32
tiles and softmax statistics, cuDNN's fused kernel keeps its softmax statistics in float32), and
casts the probabilities back to the compute dtype only for the product with v.

Positions inside attention (`model.position`, declared in models/positions.py): an encoding may
rotate q and k before any implementation sees them (`rotary` is RoPE's rotation) and put a rule on
the scores, `ScoreModifier` (ALiBi's bias, or a bias with parameters), which every implementation
applies to each tile it computes from the tile's query and key positions. So is `model.causal`
(query i sees keys j <= i only), which blockwise and local also use to skip what it masks.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

# A padded key's score. `where` with the most negative finite float, not -inf and not an additive
# bias: adding finfo.min to a negative score overflows to -inf, and a query whose keys are all padding
# would then produce NaN instead of a harmless uniform row.
_MASKED = float(np.finfo(np.float32).min)

ROPE_BASE = 10000.0


# ------------------------------------------------------------------------------------------ positions


def rotary(x: jax.Array, grid_width: int = 0, positions=None) -> jax.Array:
  """RoPE (Su et al.): x [B, L, H, D] with channel pair (c, c + D/2) at position p turned by the angle
  p·ROPE_BASE^(−2c/D), so that a rotated query and key score by their content and i − j only.

  Pairs are the two halves (GPT-NeoX's layout), not the paper's adjacent channels: the same family up
  to a fixed permutation of the learned projections' channels, without an interleaving reshape.
  Angles in float64 and the rotation in float32 whatever the compute dtype: a bfloat16 angle is off
  by whole radians from position ~500 on.

  grid_width > 0: axial RoPE for a sequence that is an image read row by row: the first half of the
  channels is rotated by each position's row (p // grid_width), the second half by its column, so
  that scores depend on content and the two offsets (Δrow, Δcolumn) only.
  """
  if grid_width:
    rows, cols = np.divmod(np.arange(x.shape[1]), grid_width)
    half_a, half_b = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([rotary(half_a, positions=rows), rotary(half_b, positions=cols)], -1)
  length, dim = x.shape[1], x.shape[-1]
  positions = np.arange(length) if positions is None else positions
  angle = positions[:, None] * ROPE_BASE ** (-np.arange(0, dim, 2) / dim)
  cos = np.cos(angle)[:, None].astype(np.float32)  # [L, 1, D/2], broadcast over heads
  sin = np.sin(angle)[:, None].astype(np.float32)
  x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
  return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def alibi_slopes(num_heads: int) -> tuple[float, ...]:
  """Press et al.'s head slopes: 2^(−8(h+1)/H) for H a power of 2; otherwise those of the largest
  power of 2 below H followed by every other slope of the next one (their reference code's rule)."""
  geometric = lambda n: [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
  below = 2 ** int(np.log2(num_heads))
  return tuple(geometric(below) + geometric(2 * below)[0::2][:num_heads - below])


@dataclasses.dataclass(frozen=True)
class ScoreModifier:
  """What query and key positions do to float32 scores, the same rule in every implementation.

  Each implementation hands every score tile it computes (dense: one L×L tile; blockwise: each
  block pair; local: each window) to `apply` with the absolute positions of the tile's queries and
  keys, so a rule is written once, as a function of positions, and blockwise and local never build it
  as an L×L array. A pytree whose only leaves are `learned_bias`'s: blockwise's custom VJP takes it
  as an argument and returns the bias parameters' gradient, and the rest is static.

  alibi: per-head slopes m_h (`alibi_slopes`); query i's score for key j gets −m_h·|i − j| (Press et
    al.'s bidirectional form; with `causal` only j <= i remain: the usual one-sided −m_h·(i − j)).
    () for none.
  grid_width: > 0 for ALiBi on an image read row by row, `grid_width` pixels a row: the distance is
    the Euclidean one between the two pixels on the grid, √(Δrow² + Δcolumn²), instead of |i − j|.
  causal: query i sees keys j <= i only. Blockwise also skips the block pairs it rules out
    (`_block_pairs`) and local drops the next block from each window.
  learned_bias: None, or a bias with parameters: a pytree (its leaves the parameters) called as
    `learned_bias(q_pos, k_pos)` → float32 [..., H, cq, ck], like `bias`. Every implementation adds
    it where it adds ALiBi's, and the parameters get gradients from each (blockwise: per block pair
    in its backward).
  """
  alibi: tuple[float, ...] = ()
  causal: bool = False
  grid_width: int = 0
  learned_bias: Any = None

  @property
  def biased(self) -> bool:
    """Whether the rule adds to the scores (not only masks them)."""
    return bool(self.alibi) or self.learned_bias is not None

  def bias(self, q_pos, k_pos) -> jax.Array:
    """The additive part, [..., H, cq, ck] for positions q_pos [..., cq] and k_pos [..., ck] (a
    scalar 0 when the rule adds nothing); no gradient flows to the positions."""
    # jnp before the outer difference: with numpy positions it would become an L×L program constant.
    q_pos, k_pos = jnp.asarray(q_pos, jnp.int32), jnp.asarray(k_pos, jnp.int32)
    total = None
    if self.alibi:
      if self.grid_width:
        rows = q_pos[..., :, None] // self.grid_width - k_pos[..., None, :] // self.grid_width
        cols = q_pos[..., :, None] % self.grid_width - k_pos[..., None, :] % self.grid_width
        distance = jnp.sqrt((rows * rows + cols * cols).astype(jnp.float32))
      else:
        distance = jnp.abs(q_pos[..., :, None] - k_pos[..., None, :]).astype(jnp.float32)
      total = -jnp.asarray(self.alibi, jnp.float32)[:, None, None] * distance[..., None, :, :]
    if self.learned_bias is not None:
      learned = self.learned_bias(q_pos, k_pos)
      total = learned if total is None else total + learned
    return jnp.zeros((), jnp.float32) if total is None else total

  def apply(self, scores, q_pos, k_pos, key_mask, fill):
    """scores [..., H, cq, ck] with the rule applied, then keys where `key_mask` is False at `fill`.

    The bias goes before the padding `where`, so a padded key scores exactly `fill` as without
    positions (all-padding rows stay uniform). key_mask and fill broadcast against scores.
    """
    if self.biased:
      scores = scores + self.bias(q_pos, k_pos)
    scores = jnp.where(key_mask, scores, fill)
    if self.causal:
      # -inf, after the padding `where`: a future key gets no weight even in a row whose keys are all
      # padding, which is then uniform over the keys up to its own position.
      past = jnp.asarray(k_pos)[..., None, :] <= jnp.asarray(q_pos)[..., :, None]
      scores = jnp.where(past[..., None, :, :], scores, -jnp.inf)
    return scores


jax.tree_util.register_dataclass(ScoreModifier, data_fields=["learned_bias"],
                                 meta_fields=["alibi", "causal", "grid_width"])
NO_MODIFIER = ScoreModifier()


def score_modifier(cfg, position_params=None) -> ScoreModifier:
  """The rule a ModelConfig's position encoding (with its parameters `position_params`, as the
  encoder creates them) and `causal` put on scores."""
  return ScoreModifier(causal=cfg.causal, **cfg.encoding.score_rule(cfg, position_params or {}))


# ------------------------------------------------------------------------------------------ dense


def dense_scores(q, k, key_mask, modifier: ScoreModifier = NO_MODIFIER) -> jax.Array:
  """float32 [B, H, Lq, Lk]: the scores dense attention softmaxes (q kᵀ/√d, the position rule, padded
  keys at `_MASKED`); also what the attention analysis reads as logits."""
  scale = q.shape[-1] ** -0.5
  # Accumulated in float32: a bfloat16 product would round every score before the softmax.
  scores = jnp.einsum("bqhd,bkhd->bhqk", q * scale, k, preferred_element_type=jnp.float32)
  position = np.arange(q.shape[1])
  return modifier.apply(scores, position, position, key_mask[:, None, None, :], _MASKED)


def dense_attention(q, k, v, key_mask, *, dropout_fn=None, modifier: ScoreModifier = NO_MODIFIER):
  """softmax(q kᵀ/√d) v with padded keys excluded. q,k,v: [B, L, H, D]; key_mask: [B, L] (True = real).

  Returns (output [B, L, H, D], weights [B, H, Lq, Lk]). Scores and softmax are float32 whatever the
  compute dtype, because the softmax is where low precision first breaks long sequences.
  """
  weights = jax.nn.softmax(dense_scores(q, k, key_mask, modifier), axis=-1)
  if dropout_fn is not None:
    weights = dropout_fn(weights)
  out = jnp.einsum("bhqk,bkhd->bqhd", weights.astype(v.dtype), v)
  return out, weights


# ------------------------------------------------------------------------------------------ blockwise


def _blocks(x, n: int, *, transposed: bool = False):
  """[B, n·c, H, D] → [n, B, H, c, D], or [n, B, H, D, c] when `transposed`, in one copy.

  Head-major tiles, each operand made once in the layout its block products consume, so that every
  product inside the loops is a plain [M, K]·[K, N] matmul per (batch, head): XLA:CPU hands exactly
  those to YNNPACK, and any other layout costs a transposed copy of a tile per block pair (measured:
  that was a quarter of the backward pass at L=512).
  """
  batch, padded, heads, dim = x.shape
  # jnp: a caller's numpy array (a mask, a cotangent) would stay numpy here, and the block loops
  # index their tiles with a traced block number.
  x = jnp.asarray(x).reshape(batch, n, padded // n, heads, dim)
  return x.transpose((1, 0, 3, 4, 2) if transposed else (1, 0, 3, 2, 4))


def _unblocks(x, *, transposed: bool = False):
  """The inverse of `_blocks`: back to [B, n·c, H, D]."""
  x = x.transpose((1, 0, 4, 2, 3) if transposed else (1, 0, 3, 2, 4))  # [B, n, c, H, D]
  batch, n, block, heads, dim = x.shape
  return x.reshape(batch, n * block, heads, dim)


def _mask_blocks(key_mask, n: int):
  """[B, n·c] → [n, B, c]."""
  return jnp.moveaxis(jnp.asarray(key_mask).reshape(key_mask.shape[0], n, -1), 1, 0)


def _fill_values(padded: int, length: int, block: int):
  """[n, block] score of a masked key: `_MASKED` for the caller's keys, -inf for our length padding.

  `_MASKED` exactly as in dense, so all-padding rows stay uniform over the caller's L keys; -inf for
  keys that exist only because L was padded up to a block multiple, so they never receive weight, not
  even in such a uniform row. (The padded mask is False there, so one `where` applies both.)
  """
  exists = np.arange(padded).reshape(padded // block, block) < length
  return jnp.asarray(np.where(exists, _MASKED, -np.inf), jnp.float32)


def _block_scores(q, k_t, key_mask, fill, q_pos, k_pos, modifier):
  """float32 scores [B, H, cq, ck] of a query tile [B, H, cq, D] against a transposed key tile
  [B, H, D, ck] at positions q_pos [cq] and k_pos [ck], masked keys at `fill`."""
  s = jnp.einsum("bhqd,bhdk->bhqk", q, k_t, preferred_element_type=jnp.float32)
  return modifier.apply(s, q_pos, k_pos, key_mask[:, None, None, :], fill[None, None, None, :])


def _block_positions(padded: int, block: int):
  """[n, block] absolute positions of each block's rows."""
  return jnp.arange(padded, dtype=jnp.int32).reshape(padded // block, block)


def _block_pairs(n: int, causal: bool, *, key_major: bool = False):
  """The (query block i, key block j) products to compute, as two [P] int32 arrays: all n² pairs, or
  with causal attention those with j <= i, so a key block wholly in a query block's future costs no
  product at all (static, so the saving is visible in the program: n(n+1)/2 of n² block pairs).

  Query-major (each query block's key blocks in turn) or key-major. The order changes only float
  rounding: every pair updates its own rows' accumulators, and the online softmax is order-free.
  """
  needed = np.tril(np.ones((n, n), bool)) if causal else np.ones((n, n), bool)
  i, j = np.nonzero(needed) if not key_major else np.nonzero(needed.T)[::-1]
  return jnp.asarray(i, jnp.int32), jnp.asarray(j, jnp.int32)


def _flash_forward(q, k, v, key_mask, length: int, block: int, modifier):
  """Online-softmax attention of pre-scaled q, one block pair per step of a scan over
  `_block_pairs` (query-major), each query block's running max, sum and output held in [n, ...]
  accumulators.

  Returns out [B, Lp, H, D] and each query's running max and log-sum, both [n, B, H, c]. They are kept
  apart rather than summed into a logsumexp because for an all-padding row the max is finfo.min, which
  absorbs log(L) and would make the backward's recomputed probabilities 1 instead of 1/L.
  """
  batch, padded, heads, dim = q.shape
  n = padded // block
  q_b, k_t, v_b = _blocks(q, n), _blocks(k, n, transposed=True), _blocks(v, n)
  masks, fills = _mask_blocks(key_mask, n), _fill_values(padded, length, block)
  positions = _block_positions(padded, block)

  def pair(carry, ij):
    m, l, acc = carry
    i, j = ij
    s = _block_scores(q_b[i], k_t[j], masks[j], fills[j], positions[i], positions[j], modifier)
    m_new = jnp.maximum(m[i], s.max(-1))
    # m starts at -inf but m_new is finite from a row's first block on (in every block pair each
    # query sees at least one existing key, and causally at least its own position), so neither exp
    # below ever sees inf - inf.
    correction = jnp.exp(m[i] - m_new)
    p = jnp.exp(s - m_new[..., None])
    pv = jnp.einsum("bhqk,bhkd->bhqd", p.astype(v_b.dtype), v_b[j],
                    preferred_element_type=jnp.float32)
    return (m.at[i].set(m_new), l.at[i].set(l[i] * correction + p.sum(-1)),
            acc.at[i].set(acc[i] * correction[..., None] + pv)), None

  init = (jnp.full((n, batch, heads, block), -jnp.inf, jnp.float32),
          jnp.zeros((n, batch, heads, block), jnp.float32),
          jnp.zeros((n, batch, heads, block, dim), jnp.float32))
  (m, l, acc), _ = jax.lax.scan(pair, init, _block_pairs(n, modifier.causal))
  return _unblocks((acc / l[..., None]).astype(q.dtype)), (m, jnp.log(l))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _flash(q, k, v, key_mask, modifier: ScoreModifier, length: int, block: int):
  return _flash_forward(q, k, v, key_mask, length, block, modifier)[0]


def _flash_fwd(q, k, v, key_mask, modifier, length, block):
  out, stats = _flash_forward(q, k, v, key_mask, length, block, modifier)
  # O(L) residuals only: the backward recomputes each block's probabilities from the softmax stats.
  return out, (q, k, v, key_mask, modifier, out, stats)


def _flash_bwd(length, block, residuals, d_out):
  """FlashAttention-2's backward over the forward's block pairs, key-major (a key block's dK and dV
  tiles stay hot while its query blocks pass).

  dK and dV are accumulated transposed ([B, H, D, c]): dKᵀ = Qᵀ·dS and dVᵀ = dOᵀ·P then take the
  score tiles as they come, where dK = dSᵀ·Q would need every dS tile transposed. A learned bias's
  parameters get Σ_batch dS of each tile through the bias function's own VJP, so whatever maps
  positions to the bias is differentiated without an L×L array.
  """
  q, k, v, key_mask, modifier, out, (row_max, log_sum) = residuals
  batch, padded, heads, dim = q.shape
  n = padded // block
  # Σ_k P·dP per query, the softmax Jacobian's correction term, from O and dO instead of P.
  delta = jnp.einsum("bqhd,bqhd->bhq", d_out.astype(jnp.float32), out.astype(jnp.float32))
  delta = jnp.moveaxis(delta.reshape(batch, heads, n, block), 2, 0)
  f32 = functools.partial(jnp.einsum, preferred_element_type=jnp.float32)
  # Every tile made once, outside the loop, in the layout its products consume.
  q_b, q_t, do_b, do_t = (_blocks(q, n), _blocks(q, n, transposed=True), _blocks(d_out, n),
                          _blocks(d_out, n, transposed=True))
  k_b, k_t, v_t = _blocks(k, n), _blocks(k, n, transposed=True), _blocks(v, n, transposed=True)
  masks, fills = _mask_blocks(key_mask, n), _fill_values(padded, length, block)
  positions = _block_positions(padded, block)

  learned = modifier.learned_bias

  def pair(carry, ij):
    dq, dk_t, dv_t, d_learned = carry
    i, j = ij
    s = _block_scores(q_b[i], k_t[j], masks[j], fills[j], positions[i], positions[j], modifier)
    p = jnp.exp(s - row_max[i][..., None] - log_sum[i][..., None])
    dv_t = dv_t.at[j].add(f32("bhdq,bhqk->bhdk", do_t[i], p.astype(do_t.dtype)))
    dp = f32("bhqd,bhdk->bhqk", do_b[i], v_t[j])
    # Masked scores are constants (`where`), so no gradient reaches them; this also keeps rows
    # whose keys are all padding at the zero gradient that dense gives them. A fixed position bias
    # is a constant too: dS is the gradient of the q·k part and of a learned bias alike.
    ds = jnp.where(masks[j][:, None, None, :], p * (dp - delta[i][..., None]), 0.0)
    dk_t = dk_t.at[j].add(f32("bhdq,bhqk->bhdk", q_t[i], ds.astype(q_t.dtype)))
    if d_learned is not None:
      _, pull = jax.vjp(lambda b: b(positions[i], positions[j]), learned)
      d_learned = jax.tree.map(jnp.add, d_learned, pull(ds.sum(0))[0])
    return (dq.at[i].add(f32("bhqk,bhkd->bhqd", ds.astype(k_b.dtype), k_b[j])), dk_t, dv_t,
            d_learned), None

  zeros_t = jnp.zeros(k_t.shape, jnp.float32)
  init = (jnp.zeros(q_b.shape, jnp.float32), zeros_t, zeros_t,
          None if learned is None else jax.tree.map(jnp.zeros_like, learned))
  (dq, dk_t, dv_t, d_learned), _ = jax.lax.scan(pair, init,
                                                _block_pairs(n, modifier.causal, key_major=True))
  return (_unblocks(dq).astype(q.dtype), _unblocks(dk_t, transposed=True).astype(k.dtype),
          _unblocks(dv_t, transposed=True).astype(v.dtype), None,
          dataclasses.replace(modifier, learned_bias=d_learned))


_flash.defvjp(_flash_fwd, _flash_bwd)


# One block's probabilities are kept for the backward, rather than recomputed from the softmax
# statistics, while the block's scores take at most this many bytes ([B, H, L, L] float32): the
# recomputation (a score product and an exp per element) costs more than reading them back from cache.
KEPT_PROBABILITIES_MAX_BYTES = 4 << 20


def _one_block_forward(q, k, v, key_mask, modifier):
  """Attention of pre-scaled q over a sequence taken as one block: the unnormalised probabilities
  e = exp(s − max s) [B, H, L, L], each row's sum l [B, H, L] and the output (e·v)/l [B, L, H, D]."""
  q_h, k_t = _blocks(q, 1)[0], _blocks(k, 1, transposed=True)[0]
  position = _block_positions(q.shape[1], q.shape[1])[0]
  s = _block_scores(q_h, k_t, key_mask, jnp.full(q.shape[1], _MASKED, jnp.float32), position,
                    position, modifier)
  e = jnp.exp(s - s.max(-1, keepdims=True))
  l = e.sum(-1)
  out = jnp.einsum("bhqk,bhkd->bhqd", e.astype(v.dtype), _blocks(v, 1)[0],
                   preferred_element_type=jnp.float32) / l[..., None]
  return e, l, _unblocks(out[None].astype(q.dtype))


@jax.custom_vjp
def _one_block(q, k, v, key_mask, modifier: ScoreModifier):
  return _one_block_forward(q, k, v, key_mask, modifier)[2]


def _one_block_fwd(q, k, v, key_mask, modifier):
  e, l, out = _one_block_forward(q, k, v, key_mask, modifier)
  return out, (q, k, v, key_mask, modifier, out, e, l)


def _one_block_bwd(residuals, d_out):
  """`_flash_bwd` for one block pair, with the forward's probabilities instead of recomputed ones.

  Each row's 1/l goes into dO (an [L, D] scaling) rather than into the [L, L] probabilities:
  dVᵀ = (dO/l)ᵀ·e, and dS = p·(dP − δ) = e·((dO/l)·Vᵀ − δ/l).
  """
  q, k, v, key_mask, modifier, out, e, l = residuals
  f32 = functools.partial(jnp.einsum, preferred_element_type=jnp.float32)
  inv_l = 1.0 / l
  delta = jnp.einsum("bqhd,bqhd->bhq", d_out.astype(jnp.float32), out.astype(jnp.float32)) * inv_l
  do = _blocks(d_out.astype(jnp.float32), 1)[0] * inv_l[..., None]  # [B, H, L, D]
  # The barrier keeps dOᵀ a transposed copy: XLA would otherwise fold the transpose into the
  # product, whose transposed operand XLA:CPU then multiplies outside YNNPACK (head-major tiles,
  # benchmarks/README.md).
  do_t = jax.lax.optimization_barrier(do.swapaxes(-1, -2).astype(v.dtype))
  dv_t = f32("bhdq,bhqk->bhdk", do_t, e.astype(v.dtype))
  dp = f32("bhqd,bhdk->bhqk", do.astype(v.dtype), _blocks(v, 1, transposed=True)[0])
  ds = jnp.where(key_mask[:, None, None, :], e * (dp - delta[..., None]), 0.0)
  dk_t = f32("bhdq,bhqk->bhdk", _blocks(q, 1, transposed=True)[0], ds.astype(q.dtype))
  dq = f32("bhqk,bhkd->bhqd", ds.astype(k.dtype), _blocks(k, 1)[0])
  d_learned = None
  if modifier.learned_bias is not None:
    position = _block_positions(q.shape[1], q.shape[1])[0]
    _, pull = jax.vjp(lambda b: b(position, position), modifier.learned_bias)
    d_learned = pull(ds.sum(0))[0]
  return (_unblocks(dq[None]).astype(q.dtype), _unblocks(dk_t[None], transposed=True).astype(k.dtype),
          _unblocks(dv_t[None], transposed=True).astype(v.dtype), None,
          dataclasses.replace(modifier, learned_bias=d_learned))


_one_block.defvjp(_one_block_fwd, _one_block_bwd)


def _pad_length(x, padded: int, value=0):
  return jnp.pad(x, [(0, 0), (0, padded - x.shape[1])] + [(0, 0)] * (x.ndim - 2),
                 constant_values=value)


def _no_dropout(implementation: str, dropout_fn) -> None:
  if dropout_fn is not None:
    raise ValueError(
        f"attention={implementation!r} does not support dropout on the attention weights (it never "
        f"materialises them); set model.dropout_rate=0 or use attention='dense'.")


def blockwise_attention(q: jax.Array, k: jax.Array, v: jax.Array, key_mask: jax.Array, *,
                        block_size: int, sequence_chunk: int = 0,
                        dropout_fn: Callable | None = None,
                        modifier: ScoreModifier = NO_MODIFIER) -> tuple[jax.Array, None]:
  """Exact attention (the same outputs and gradients as `dense_attention`) in memory linear in L.

  Queries and keys are processed in blocks of `block_size` with a streaming softmax (running max and
  sum, float32 accumulators); the custom backward recomputes each block's probabilities from the saved
  softmax statistics, so neither pass holds more than one [B, H, block, block] score tile per step.
  L need not be a multiple of `block_size` (padded internally). A query whose keys are all padding
  averages all L values uniformly, as in dense. No attention dropout; returns weights=None.

  One block (block_size >= L) whose scores, batch × heads × L² float32, fit in
  KEPT_PROBABILITIES_MAX_BYTES: the probabilities are kept for the backward (`_one_block`), which
  then neither recomputes the scores nor their exp; memory stays bounded by that constant.

  sequence_chunk > 0: the batch goes through in a loop, this many sequences per step (the largest
  divisor of the batch that is no larger), so that each step's score tiles stay in a CPU core's cache
  rather than streaming [B, H, block, block] tiles through memory (`platform.specialise` sets it).
  Slice s of the loop holds sequences s, s + n, s + 2n, ... (n steps): the batch's leading axis,
  which data parallelism shards, stays leading in every slice, so each device loops over its own
  sequences without moving any. The same numbers as the whole batch at once: every sequence's
  attention is its own.
  """
  _no_dropout("blockwise", dropout_fn)
  if block_size <= 0:
    raise ValueError(f"attention_block_size={block_size} must be positive.")
  if sequence_chunk < 0:
    raise ValueError(f"sequence_chunk={sequence_chunk} must be >= 0 (0: the whole batch at once).")
  batch, length = q.shape[:2]
  block = min(block_size, length)
  padded = -(-length // block) * block
  q, k, v = (_pad_length(x, padded) for x in (q * q.shape[-1] ** -0.5, k, v))
  key_mask = _pad_length(key_mask, padded, False)
  chunk = max((c for c in range(1, min(sequence_chunk, batch) + 1) if batch % c == 0), default=batch)
  if block == length and batch * q.shape[2] * length * length * 4 <= KEPT_PROBABILITIES_MAX_BYTES:
    out = _one_block(q, k, v, key_mask, modifier)  # fits as it is: no loop over the batch either
  elif chunk == batch:
    out = _flash(q, k, v, key_mask, modifier, length, block)
  else:
    steps = batch // chunk
    split = lambda x: jnp.moveaxis(x.reshape((chunk, steps) + x.shape[1:]), 1, 0)
    out = jax.lax.map(lambda xs: _flash(*xs, modifier, length, block),
                      (split(q), split(k), split(v), split(key_mask)))
    out = jnp.moveaxis(out, 0, 1).reshape((batch,) + out.shape[2:])
  return out[:, :length], None


# ------------------------------------------------------------------------------------------ local


def local_attention(q: jax.Array, k: jax.Array, v: jax.Array, key_mask: jax.Array, *,
                    block_size: int, dropout_fn: Callable | None = None,
                    modifier: ScoreModifier = NO_MODIFIER) -> tuple[jax.Array, None]:
  """Block-local attention: query block i sees key blocks i-1, i and i+1 (padded keys excluded); a
  causal one i-1 and i, the future part of block i masked.

  Scores are [B, L/block, H, block, 3·block] (2·block causal): linear in L, never L×L. A query that
  sees no real key in its window averages the values of its window uniformly. No attention dropout;
  weights=None.
  """
  _no_dropout("local", dropout_fn)
  if block_size <= 0:
    raise ValueError(f"attention_block_size={block_size} must be positive.")
  batch, length, heads, dim = q.shape
  block = min(block_size, length)
  n = -(-length // block)
  if n <= 2:
    # Every query's window then covers the whole sequence: plain attention, without the 3x-wide
    # windows' wasted edge slots. (Rows without a real key agree too: uniform over all L keys.)
    return dense_attention(q, k, v, key_mask, modifier=modifier)[0], None
  padded = n * block
  # A causal query's next block is all future: leaving it out saves a third of the window.
  offsets = (-1, 0) if modifier.causal else (-1, 0, 1)

  def windows(x):
    """[B, Lp, ...] → [B, n, len(offsets)·block, ...]: each block's neighbours at `offsets`."""
    x = x.reshape(batch, n, block, *x.shape[2:])
    x = jnp.pad(x, [(0, 0), (1, 1)] + [(0, 0)] * (x.ndim - 2))
    return jnp.concatenate([x[:, 1 + o:n + 1 + o] for o in offsets], axis=2)

  q = _pad_length(q * dim ** -0.5, padded).reshape(batch, n, block, heads, dim)
  k, v = windows(_pad_length(k, padded)), windows(_pad_length(v, padded))
  mask = windows(_pad_length(key_mask, padded, False))
  # Static [n, window] key positions. Masked window slots score `_MASKED` as in dense, but slots
  # outside the sequence (before the start, past the end, our length padding) -inf, so that they never
  # get weight, not even in an all-padding row. The windowed mask is False in those slots, so one
  # `where` does it.
  position = np.arange(-block, padded + block).reshape(n + 2, block)
  k_pos = np.concatenate([position[1 + o:n + 1 + o] for o in offsets], axis=1)
  fill = np.where((k_pos >= 0) & (k_pos < length), _MASKED, -np.inf).astype(np.float32)

  s = jnp.einsum("bnqhd,bnkhd->bnhqk", q, k, preferred_element_type=jnp.float32)
  s = modifier.apply(s, position[1:-1], k_pos, mask[:, :, None, None, :],
                     fill[None, :, None, None, :])
  weights = jax.nn.softmax(s, axis=-1)
  out = jnp.einsum("bnhqk,bnkhd->bnqhd", weights.astype(v.dtype), v)
  return out.reshape(batch, padded, heads, dim)[:, :length], None


# ------------------------------------------------------------------------------------------ cudnn


def cudnn_attention(q: jax.Array, k: jax.Array, v: jax.Array, key_mask: jax.Array, *,
                    dropout_fn: Callable | None = None,
                    modifier: ScoreModifier = NO_MODIFIER) -> tuple[jax.Array, None]:
  """cuDNN flash attention (`jax.nn.dot_product_attention(implementation='cudnn')`), GPU only.

  cuDNN takes padding as per-example key lengths, so real tokens must form a prefix of each row
  (trailing padding, as SequenceModel's inputs have); a mask with holes would be misread. cuDNN runs in
  float16/bfloat16 only: float32 inputs are cast to bfloat16 and the output back to float32 (so
  attention='auto' never picks it for a float32 model); inside, the kernel accumulates the scores and
  keeps the softmax's running max and sum in float32. An example with no real key gets dense's answer
  (the mean of all values; causal: of the values up to each query). A position bias (ALiBi's, or a
  learned one) goes in as cuDNN's `bias` operand, [1, H, L, L] in the compute dtype (the simple way:
  an L×L array, so 'auto' does not pick cuDNN for an encoding that biases scores, one whose
  `fused_kernel` flag is off), and the causal mask as `is_causal`. Checked against dense, with padding, causal
  mask and ALiBi, by tests/test_mixed_precision.py's `accelerator` tests on a CUDA GPU
  (benchmarks/accelerator_check.sh); no GPU has run them yet.
  """
  _no_dropout("cudnn", dropout_fn)
  dtype = q.dtype if q.dtype in (jnp.float16, jnp.bfloat16) else jnp.bfloat16
  lengths = key_mask.sum(-1, dtype=jnp.int32)
  position = np.arange(q.shape[1])
  bias = modifier.bias(position, position)[None].astype(dtype) if modifier.biased else None
  # cuDNN leaves rows with zero keys undefined (we measured garbage of order 1e36 on an H200), so such
  # examples run with one key and are then replaced by dense's answer (`_uniform_rows`).
  out = jax.nn.dot_product_attention(q.astype(dtype), k.astype(dtype), v.astype(dtype), bias,
                                     is_causal=modifier.causal,
                                     key_value_seq_lengths=jnp.maximum(lengths, 1),
                                     implementation="cudnn")
  empty = (lengths == 0)[:, None, None, None]
  return jnp.where(empty, _uniform_rows(v, modifier.causal), out.astype(q.dtype)), None


def _uniform_rows(v, causal: bool):
  """Dense's output for an example without a real key: the mean of all values, or causally of the
  values up to each query, [B, L or 1, H, D]."""
  if not causal:
    return v.mean(axis=1, keepdims=True)
  counts = jnp.arange(1, v.shape[1] + 1, dtype=jnp.float32)[None, :, None, None]
  return (jnp.cumsum(v.astype(jnp.float32), axis=1) / counts).astype(v.dtype)


# ------------------------------------------------------------------------------------------ dispatch

IMPLEMENTATIONS = ("auto", "dense", "blockwise", "local", "cudnn")


def attend(q, k, v, key_mask, *, implementation: str, block_size: int, sequence_chunk: int = 0,
           dropout_fn: Callable | None = None, modifier: ScoreModifier = NO_MODIFIER):
  """Dispatches to an attention implementation; all take and return the same shapes."""
  options = dict(dropout_fn=dropout_fn, modifier=modifier)
  if implementation in ("auto", "dense"):  # 'auto' unresolved by the platform: dense (docstring)
    return dense_attention(q, k, v, key_mask, **options)
  if implementation == "blockwise":
    return blockwise_attention(q, k, v, key_mask, block_size=block_size,
                               sequence_chunk=sequence_chunk, **options)
  if implementation == "local":
    return local_attention(q, k, v, key_mask, block_size=block_size, **options)
  if implementation == "cudnn":
    return cudnn_attention(q, k, v, key_mask, **options)
  raise ValueError(f"attention implementation {implementation!r} must be one of {IMPLEMENTATIONS}.")


class MultiHeadAttention(nn.Module):
  cfg: Any  # models.transformer.ModelConfig: num_heads, dropout_rate, dtype, attention, ...

  @nn.compact
  def __call__(self, x, key_mask, *, train: bool, position_params=None):
    """`position_params`: the position encoding's parameters, which the encoder creates once and
    hands to every layer."""
    cfg = self.cfg
    d_model, num_heads = x.shape[-1], cfg.num_heads
    if d_model % num_heads:
      raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}.")
    head_dim = d_model // num_heads
    project = functools.partial(nn.DenseGeneral, features=(num_heads, head_dim),
                                dtype=cfg.compute_dtype)
    q = project(name="query")(x)
    # No key bias: it adds q·b_k equally to every score of a query, which softmax ignores, so its true
    # gradient is exactly zero and Adam would only turn float noise into lr-sized random steps.
    k = project(name="key", use_bias=False)(x)
    v = project(name="value")(x)
    q, k = cfg.encoding.rotate(q, k, cfg)
    modifier = score_modifier(cfg, position_params)
    dropout_fn = None
    if train and cfg.dropout_rate > 0:
      dropout_fn = nn.Dropout(cfg.dropout_rate, deterministic=False)
    out, weights = attend(q, k, v, key_mask, implementation=cfg.attention,
                          block_size=cfg.attention_block_size,
                          sequence_chunk=cfg.attention_sequence_chunk, dropout_fn=dropout_fn,
                          modifier=modifier)
    # Recorded only when the caller asks for the 'intermediates' collection (attention analysis);
    # otherwise `sow` is a no-op and costs nothing inside jit. Memory-efficient implementations
    # never materialise the weights and return None.
    if weights is not None:
      self.sow("intermediates", "attention_weights", weights)
      # A collection of their own, computed only when asked for: the maps' callers (the training
      # tracker among them) would otherwise hold a second [B, H, L, L] array per layer.
      if self.is_mutable_collection("attention_logits"):
        self.sow("attention_logits", "logits", dense_scores(q, k, key_mask, modifier))
    return nn.DenseGeneral(features=d_model, axis=(-2, -1), dtype=cfg.compute_dtype, name="out")(out)
