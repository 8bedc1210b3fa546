"""Loss weighting on the gradients of a shared embedding: GraP and the baselines it is compared with.

Every method here sees the same inputs, computed once per step on the *detached* encoder output z:
the per-loss gradients dL_i/dz stacked as [K, ...], the losses [K], and (GraP only) the downstream
gradient dL_down/dz. It returns the gradient to send back through the encoder (one backward pass for
all losses) and the per-loss coefficients λ_i of that gradient on the raw losses (dz = Σ λ_i dL_i/dz),
for the logs. The heads are not weighted: each trains on its own loss (spt_jax/objectives/composite/).
All functions are pure and jit-friendly; the state is a dict of arrays, so it checkpoints with the
optimiser state.

GraP (Karpukhin & Savchenko, 2026; reference: ivan-chai/aligned-hpo `AlignedHPOptimizer`, f009d7b):
  m_i  = EMA of ||dL_i/dz||                  (the first update takes the norm itself)
  g_i  = (dL_i/dz) / m_i,   d = dL_down/dz / ||dL_down/dz||
  C    = cos(g_i, g_j),     p_i = cos(g_i, d) (Gram and alignment converted to cosines), smoothed:
         plain average over the first `warmup` updates, EMA afterwards
  u    = |l| · m   ('sgd', the reference's default)   or   u = |l|   ('scaled-sgd')
  w    = u / sqrt(uᵀ C u)                     (logits l start at 1; unit-norm composite gradient)
  l   <- Adam step ascending pᵀ w(l)         (C, p, m constants for this derivative; none during
                                              the first `delay` steps)
  dz   = Σ_i w_i g_i = Σ_i λ_i dL_i/dz,  λ_i = w_i / m_i
With 'sgd', λ_i = |l_i| / sqrt(uᵀCu): the logits weigh the *raw* losses and the start point is their
plain sum, rescaled to a unit step. With 'scaled-sgd', they weigh the EMA-normalised gradients and the
start point gives every loss an equal share. Either way pᵀw is the cosine between the normalised
composite step and the downstream gradient: to first order in the step size it is minus the
look-ahead hypergradient of L_down (tests/test_grap.py checks both directions against autodiff
through one step). The state may also hold the downstream probe and its own Adam (`probe_init`): the
probe is GraP's, it never reaches the encoder, and keeping it here gives it its own optimiser.

Baselines: 'raw_sum' (dz = Σ dL_i/dz, the unweighted sum of the raw losses: GraP-'sgd''s start point),
'equal_norm' (dz = Σ (dL_i/dz) / m_i, each loss's gradient at equal EMA norm: GraP-'scaled-sgd''s
start point), 'fixed' weights on the raw losses, GradNorm and PCGrad.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

WEIGHTINGS = ("grap", "raw_sum", "equal_norm", "fixed", "gradnorm", "pcgrad")
PARAMETRISATIONS = ("sgd", "scaled-sgd")
EPS = 1e-8

State = dict[str, Any]


# ---------------------------------------------------------------------------------------- GraP core
def running_norm(norm_ema: jax.Array, norms: jax.Array, count: jax.Array, ema: float) -> jax.Array:
  """EMA of gradient norms; the first observation initialises it (no bias towards zero)."""
  return jnp.where(count == 0, norms, ema * norm_ema + (1.0 - ema) * norms)


def cosine_statistics(g: jax.Array, d: jax.Array) -> tuple[jax.Array, jax.Array]:
  """g [K, N], d [N] → (C [K, K] cosines between the g_i, p [K] cosines of each g_i with d)."""
  gram = g @ g.T
  r = jnp.sqrt(jnp.maximum(jnp.diagonal(gram), EPS ** 2))
  d_norm = jnp.maximum(jnp.linalg.norm(d), EPS ** 2)
  return gram / (r[:, None] * r[None, :]), (g @ d) / (r * d_norm)


def smooth(prev: jax.Array, new: jax.Array, count: jax.Array, ema: float, warmup: int) -> jax.Array:
  """Running statistic after `count` earlier updates: plain mean while count < warmup, then EMA."""
  mean = (prev * count + new) / (count + 1)
  moving = ema * prev + (1.0 - ema) * new
  return jnp.where(count == 0, new, jnp.where(count < warmup, mean, moving))


def magnitude(logits: jax.Array) -> jax.Array:
  """|l| with derivative +1 at 0 (as the reference), so that a logit at exactly 0 can grow again."""
  return jnp.where(logits >= 0, logits, -logits)


def weights(logits: jax.Array, cos: jax.Array, norms: jax.Array | None = None) -> jax.Array:
  """u / sqrt(uᵀ C u) with u = |logits| · norms ('sgd') or |logits| (norms None, 'scaled-sgd'):
  the weights of the unit gradients whose composite, at cosines `cos`, has unit norm."""
  u = magnitude(logits) if norms is None else magnitude(logits) * norms
  return u / jnp.sqrt(jnp.maximum(u @ cos @ u, EPS ** 2))


def alignment(logits: jax.Array, cos: jax.Array, align: jax.Array,
              norms: jax.Array | None = None) -> jax.Array:
  """pᵀ w(logits): cosine of the normalised composite step with the downstream gradient."""
  return align @ weights(logits, cos, norms)


def ascent_direction(logits: jax.Array, cos: jax.Array, align: jax.Array,
                     norms: jax.Array | None = None) -> jax.Array:
  """d(pᵀw)/d logits with C, p (and the norms) held fixed: the direction GraP moves its logits in."""
  const = jax.lax.stop_gradient
  return jax.grad(alignment)(logits, const(cos), const(align),
                             None if norms is None else const(norms))


def grap_init(num_losses: int, tx: optax.GradientTransformation) -> State:
  logits = jnp.ones((num_losses,), jnp.float32)
  return {"logits": logits, "logit_opt": tx.init(logits),
          "norm_ema": jnp.zeros((num_losses,), jnp.float32),
          "norm_updates": jnp.zeros((), jnp.int32),
          # Identity / zero until the first downstream signal: the start point's weights meanwhile.
          "cos": jnp.eye(num_losses, dtype=jnp.float32),
          "align": jnp.zeros((num_losses,), jnp.float32),
          "updates": jnp.zeros((), jnp.int32)}


def grap_step(state: State, loss_grads: jax.Array, down_grad: jax.Array, has_down: jax.Array,
              tx: optax.GradientTransformation, *, ema: float, warmup: int,
              parametrisation: str = "sgd", delay: int = 0
              ) -> tuple[State, jax.Array, jax.Array, dict]:
  """One GraP update. loss_grads [K, ...] = dL_i/dz; down_grad [...] = dL_down/dz; has_down: whether
  this batch carried any labelled example (if not, statistics and logits are left as they are).
  `delay`: the logits stay frozen while fewer than `delay` steps have passed (the statistics still
  accumulate), so that they start moving once the probe has learnt to read something.

  Returns (state, z-gradient [...], coefficients λ [K] on the raw losses, info of [K] vectors).
  The z-gradient uses the weights of the logits *before* this step's logit update, as the reference.
  Keys of `state` other than GraP's own (the probe's) are passed through unchanged.
  """
  if parametrisation not in PARAMETRISATIONS:
    raise ValueError(f"parametrisation={parametrisation!r} must be one of {PARAMETRISATIONS}.")
  k = loss_grads.shape[0]
  flat = loss_grads.reshape(k, -1).astype(jnp.float32)
  norms = jnp.linalg.norm(flat, axis=1)
  norm_ema = running_norm(state["norm_ema"], norms, state["norm_updates"], ema)
  inv = 1.0 / jnp.maximum(norm_ema, EPS ** 2)
  cos_new, align_new = cosine_statistics(flat * inv[:, None], down_grad.reshape(-1))
  count = state["updates"]
  cos = jnp.where(has_down, smooth(state["cos"], cos_new, count, ema, warmup), state["cos"])
  align = jnp.where(has_down, smooth(state["align"], align_new, count, ema, warmup),
                    state["align"])
  logits = state["logits"]
  scale = norm_ema if parametrisation == "sgd" else None
  w = weights(logits, cos, scale)
  direction = ascent_direction(logits, cos, align, scale)
  # Ascent on pᵀw: the optimiser minimises, so it is handed the negated direction.
  step, logit_opt = tx.update(-direction, state["logit_opt"], logits)
  move = has_down & (state["norm_updates"] >= delay)
  keep = lambda new, old: jnp.where(move, new, old)
  new_state = dict(
      state, logits=keep(optax.apply_updates(logits, step), logits),
      logit_opt=jax.tree.map(keep, logit_opt, state["logit_opt"]),
      norm_ema=norm_ema, norm_updates=state["norm_updates"] + 1,
      cos=cos, align=align, updates=count + has_down.astype(jnp.int32))
  coef = w * inv
  z_grad = jnp.tensordot(coef, flat, 1).reshape(loss_grads.shape[1:])
  info = {"weight": w, "coef": coef, "norm_ema": norm_ema, "align": align, "logit": logits,
          "direction": direction, "cos_mean": (cos.sum(1) - 1.0) / max(k - 1, 1)}
  return new_state, z_grad, coef, info


# ---------------------------------------------------------------------------------------- Baselines
def equal_norm_init(num_losses: int) -> State:
  return {"norm_ema": jnp.zeros((num_losses,), jnp.float32),
          "norm_updates": jnp.zeros((), jnp.int32)}


def equal_norm_step(state: State, loss_grads: jax.Array, *, ema: float
                    ) -> tuple[State, jax.Array, jax.Array, dict]:
  """Σ_i (dL_i/dz) / m_i with m_i GraP's EMA of the gradient norm: every loss at equal weight after
  the same normalisation GraP applies (GraP-'scaled-sgd' with its logits frozen at 1)."""
  k = loss_grads.shape[0]
  flat = loss_grads.reshape(k, -1).astype(jnp.float32)
  norm_ema = running_norm(state["norm_ema"], jnp.linalg.norm(flat, axis=1), state["norm_updates"],
                          ema)
  coef = 1.0 / jnp.maximum(norm_ema, EPS ** 2)
  z_grad = jnp.tensordot(coef, flat, 1).reshape(loss_grads.shape[1:])
  new_state = {"norm_ema": norm_ema, "norm_updates": state["norm_updates"] + 1}
  return new_state, z_grad, coef, {"weight": jnp.ones((k,), jnp.float32), "coef": coef,
                                   "norm_ema": norm_ema}


def gradnorm_init(num_losses: int, tx: optax.GradientTransformation) -> State:
  w = jnp.ones((num_losses,), jnp.float32)
  return {"weights": w, "opt": tx.init(w), "initial_losses": jnp.ones((num_losses,), jnp.float32),
          "count": jnp.zeros((), jnp.int32)}


def gradnorm_step(state: State, loss_grads: jax.Array, losses: jax.Array,
                  tx: optax.GradientTransformation, *, alpha: float
                  ) -> tuple[State, jax.Array, jax.Array, dict]:
  """GradNorm (Chen et al., 2018) with z as the shared layer: moves w_i||∇_z L_i|| towards
  mean_j(w_j||∇_z L_j||)·r_i^α, r_i the relative inverse training rate L_i(t)/L_i(0) over its mean;
  weights renormalised to sum to K after each update. The step uses the weights before the update."""
  k = loss_grads.shape[0]
  flat = loss_grads.reshape(k, -1).astype(jnp.float32)
  norms = jnp.linalg.norm(flat, axis=1)
  initial = jnp.where(state["count"] == 0, jnp.maximum(losses, EPS), state["initial_losses"])
  w = state["weights"]
  scaled = w * norms
  ratio = losses / initial
  target = jax.lax.stop_gradient(scaled.mean() * (ratio / jnp.maximum(ratio.mean(), EPS)) ** alpha)
  # d/dw_i Σ_j |w_j n_j - target_j| with the target held constant, as in the paper.
  grad = jnp.sign(scaled - target) * norms
  step, opt = tx.update(grad, state["opt"], w)
  new_w = jnp.maximum(optax.apply_updates(w, step), 0.0)
  new_w = k * new_w / jnp.maximum(new_w.sum(), EPS)
  new_state = {"weights": new_w, "opt": opt, "initial_losses": initial,
               "count": state["count"] + 1}
  z_grad = jnp.tensordot(w, flat, 1).reshape(loss_grads.shape[1:])
  return new_state, z_grad, w, {"weight": w}


def pcgrad(loss_grads: jax.Array, rng: jax.Array) -> tuple[jax.Array, jax.Array]:
  """PCGrad (Yu et al., 2020) on z: each g_i loses its component along every g_j (random order) it
  conflicts with (g_i·g_j < 0), projecting against the original g_j; returns (Σ_i g_i^PC, conflicts
  per loss)."""
  k = loss_grads.shape[0]
  flat = loss_grads.reshape(k, -1).astype(jnp.float32)
  sq = jnp.maximum(jnp.sum(flat * flat, axis=1), EPS ** 2)
  total, conflicts = jnp.zeros_like(flat[0]), []
  for i, key in enumerate(jax.random.split(rng, k)):
    g, hits = flat[i], jnp.zeros((), jnp.int32)
    for j in jax.random.permutation(key, k):
      dot = g @ flat[j]
      conflict = (j != i) & (dot < 0)
      g = g - jnp.where(conflict, dot / sq[j], 0.0) * flat[j]
      hits = hits + conflict.astype(jnp.int32)
    total = total + g
    conflicts.append(hits)
  return total.reshape(loss_grads.shape[1:]), jnp.stack(conflicts)


# ---------------------------------------------------------------------------------------- Interface
@dataclasses.dataclass(frozen=True)
class Weighting:
  """One of WEIGHTINGS over K losses, with the hyperparameters the chosen method reads.

  probe_init  GraP only: () -> the downstream probe's initial parameters, to keep the probe (and its
              own Adam at `probe_lr`, constant, no warmup) in this state; None when the probe is a
              model parameter instead (trained by the phase's optimiser)."""
  method: str
  num_losses: int
  fixed: tuple[float, ...] = ()
  logit_lr: float = 0.01
  b1: float = 0.0
  b2: float = 0.99
  ema: float = 0.9
  warmup: int = 10
  parametrisation: str = "sgd"
  delay: int = 0
  probe_init: Callable[[], Any] | None = None
  probe_lr: float = 1e-2
  gradnorm_alpha: float = 1.5
  gradnorm_lr: float = 0.025

  def __post_init__(self):
    if self.method not in WEIGHTINGS:
      hint = (" ('uniform' is two baselines: 'raw_sum' sums the raw losses, 'equal_norm' gives each "
              "loss's EMA-normalised gradient weight 1)" if self.method == "uniform" else "")
      raise ValueError(f"weighting={self.method!r} must be one of {WEIGHTINGS}{hint}.")
    if self.method == "fixed" and len(self.fixed) != self.num_losses:
      raise ValueError(f"weighting='fixed' needs {self.num_losses} fixed weights, got {self.fixed}.")
    if self.parametrisation not in PARAMETRISATIONS:
      raise ValueError(f"parametrisation={self.parametrisation!r} must be one of "
                       f"{PARAMETRISATIONS}.")

  @property
  def needs_downstream(self) -> bool:
    return self.method == "grap"

  @property
  def tx(self) -> optax.GradientTransformation:
    if self.method == "gradnorm":
      return optax.adam(self.gradnorm_lr)
    return optax.adam(self.logit_lr, b1=self.b1, b2=self.b2)

  @property
  def probe_tx(self) -> optax.GradientTransformation:
    return optax.adam(self.probe_lr)

  def init(self) -> State:
    if self.method == "grap":
      state = grap_init(self.num_losses, self.tx)
      if self.probe_init is not None:
        probe = self.probe_init()
        state.update(probe=probe, probe_opt=self.probe_tx.init(probe))
      return state
    if self.method == "gradnorm":
      return gradnorm_init(self.num_losses, self.tx)
    if self.method == "equal_norm":
      return equal_norm_init(self.num_losses)
    return {}

  def probe_step(self, state: State, probe_grads, has_down: jax.Array) -> State:
    """The probe's own Adam step on its loss's gradient; nothing moves on a batch without labels
    (Adam would otherwise decay its moments and advance its bias correction)."""
    updates, opt = self.probe_tx.update(probe_grads, state["probe_opt"], state["probe"])
    keep = lambda new, old: jnp.where(has_down, new, old)
    return dict(state, probe=jax.tree.map(keep, optax.apply_updates(state["probe"], updates),
                                          state["probe"]),
                probe_opt=jax.tree.map(keep, opt, state["probe_opt"]))

  def constant(self) -> jax.Array:
    values = self.fixed if self.method == "fixed" else (1.0,) * self.num_losses
    return jnp.asarray(values, jnp.float32)

  def __call__(self, state: State, loss_grads: jax.Array, losses: jax.Array,
               down_grad: jax.Array | None = None, has_down: jax.Array | None = None,
               rng: jax.Array | None = None) -> tuple[State, jax.Array, jax.Array, dict]:
    """→ (state, z-gradient, per-loss coefficients on the raw losses, info of [K] vectors; every
    method's info has `grad_norm`, this step's ||dL_i/dz||)."""
    grad_norm = jnp.linalg.norm(loss_grads.reshape(loss_grads.shape[0], -1).astype(jnp.float32),
                                axis=1)
    if self.method == "grap":
      out = grap_step(state, loss_grads, down_grad, has_down, self.tx, ema=self.ema,
                      warmup=self.warmup, parametrisation=self.parametrisation, delay=self.delay)
    elif self.method == "gradnorm":
      out = gradnorm_step(state, loss_grads, losses, self.tx, alpha=self.gradnorm_alpha)
    elif self.method == "equal_norm":
      out = equal_norm_step(state, loss_grads, ema=self.ema)
    else:
      coef = self.constant()
      if self.method == "pcgrad":
        z_grad, conflicts = pcgrad(loss_grads, rng)
        out = state, z_grad, coef, {"weight": coef, "conflicts": conflicts}
      else:  # raw_sum, fixed
        out = state, jnp.tensordot(coef, loss_grads.astype(jnp.float32), 1), coef, {"weight": coef}
    state, z_grad, coef, info = out
    return state, z_grad, coef, dict(info, grad_norm=grad_norm)
