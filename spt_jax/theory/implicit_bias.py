"""The implicit bias of fine-tuning a diagonal linear network, its minimiser, ℓ-order and PD.

Gradient flow on ½‖Xβ − y‖² from weights with mirror coefficients (A, B)
(`diagonal.mirror_coefficients`) converges, if it interpolates, to

  argmin_β Σ_d q_{k_d}(β_d) − ¼ log(A_d / B_d) β_d   s.t.  Xβ = y,     k_d = 16 A_d B_d,

  q_k(z) = (√k / 4) (1 − sqrt(1 + 4z²/k) + (2z/√k) asinh(2z/√k)).

Fine-tuning starts with equal units, so A = B (no linear term) and √k_d / 2 = κ_d = 2A_d, which equals
the brief's c_FT,d = c(1+λ)(1 + sqrt(1 + (β_PT,d/c)²)) + γ²/2 (`finetune_scale`; docs/theory.md derives
both). Everything here is float64 (the solver in JAX under `jax.enable_x64`): at small c the dual
Hessian spans many orders of magnitude.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg
import numpy as np

# Regime labels. q is jointly 1-homogeneous in (β, κ), so per coordinate ℓ − 1 = −κ ∂_κ q / q and
# PD = −(ℓ − 1)·s with s = β_PT ∂κ/∂β_PT / κ ∈ [0, 1], the share of the scale κ set by pretraining:
# (ℓ, PD) lies in the triangle 1 ≤ ℓ ≤ 2, −(ℓ − 1) ≤ PD ≤ 0. "Lazy" is ℓ ≥ LAZY_ELL and
# "PT-dependent" is an aggregate share PD / (1 − ℓ) ≥ DEP_SHARE (both halfway marks).
LAZY_ELL = 1.5
DEP_SHARE = 0.5
REGIMES = {(False, False): "I", (True, True): "II", (True, False): "III", (False, True): "IV"}
REGIME_NAMES = {"I": "rich, PT-independent", "II": "lazy, PT-dependent",
                "III": "lazy, PT-independent", "IV": "rich, PT-dependent"}


class SolveInfo(NamedTuple):
  iterations: np.ndarray     # Newton iterations, per problem
  rel_residual: np.ndarray   # ‖Xβ − y‖ / ‖y‖ at the returned β, per problem


# ---------------------------------------------------------------- The potential


def q(z, k):
  """The brief's q_k(z), for k > 0."""
  z, k = np.asarray(z, np.float64), np.asarray(k, np.float64)
  s = 2 * z / np.sqrt(k)
  return np.sqrt(k) / 4 * (1 - np.sqrt(1 + s ** 2) + s * np.arcsinh(s))


def q_kappa(z, kappa):
  """q_k(z) with k = 4κ², i.e. ½(z asinh(z/κ) − sqrt(z² + κ²) + κ); 0 where z = 0 (also if κ = 0).

  Written as ½(z asinh(z/κ) − z² / (sqrt(z² + κ²) + κ)) to avoid cancelling two O(κ) terms at z ≪ κ.
  """
  z, kappa = np.broadcast_arrays(np.asarray(z, np.float64), np.asarray(kappa, np.float64))
  with np.errstate(divide="ignore", invalid="ignore"):
    out = 0.5 * (z * np.arcsinh(z / kappa) - z ** 2 / (np.sqrt(z ** 2 + kappa ** 2) + kappa))
  out = np.where(z == 0, 0.0, out)
  return np.where((kappa == 0) & (z != 0), np.inf, out)


def finetune_scale(beta_pt, c, lam, gamma):
  """κ_d = c_FT,d = c(1+λ)(1 + sqrt(1 + (β_PT,d/c)²)) + γ²/2, with λ relative to c.

  Exact for pretraining by gradient flow from `diagonal.pretrain_init` (any time, not only at
  convergence); computed as (1+λ)(c + sqrt(c² + β²)) so that c → 0 is safe.
  """
  b = np.asarray(beta_pt, np.float64)
  return (1 + lam) * (c + np.sqrt(c ** 2 + b ** 2)) + gamma ** 2 / 2


def potential(beta, a, b) -> float:
  """Σ_d q_{16 A_d B_d}(β_d) − ¼ log(A_d/B_d) β_d: what gradient flow from (A, B) minimises."""
  beta, a, b = (np.asarray(t, np.float64) for t in (beta, a, b))
  with np.errstate(divide="ignore"):
    offset = np.where(beta == 0, 0.0, 0.25 * (np.log(a) - np.log(b)) * beta)
  return float(np.sum(q_kappa(beta, 2 * np.sqrt(a * b)) - offset))


# ---------------------------------------------------------------- The constrained minimiser


def _newton(x, y, log_a, log_b, tol, max_iter):
  """Damped Newton on the dual F(μ) = Σ_d ½(A_d e^{2ξ_d} + B_d e^{−2ξ_d}) − μᵀy, ξ = Xᵀμ."""
  x_in, y_in = x, y
  y_norm = jnp.maximum(jnp.linalg.norm(y), 1e-300)
  if x.shape[0] >= x.shape[1]:
    # N ≥ D: the dual Hessian X diag(·) Xᵀ is singular. With XᵀX = V S² Vᵀ, Xβ = y ⟺ S Vᵀβ = S⁻¹VᵀXᵀy
    # on the non-null directions (y consistent); null directions become zero rows pinned at μ = 0.
    # (eigh of the D×D Gram matrix: XLA's CPU SVD is an order of magnitude slower.)
    s2, v = jnp.linalg.eigh(x.T @ x)
    keep = s2 > 1e-12 * s2[-1]
    sv = jnp.sqrt(jnp.where(keep, s2, 1.0))
    x, y = jnp.where(keep[:, None], sv[:, None] * v.T, 0.0), jnp.where(keep, v.T @ (x.T @ y) / sv, 0.0)
    pin = jnp.where(keep, 0.0, 1.0)
  else:
    pin = jnp.zeros_like(y)   # X ~ Gaussian with N < D has full row rank

  def parts(mu):
    xi = x.T @ mu
    # log-space: a zero A or B gives exp(−inf) = 0, and overflow gives F = inf, which the line
    # search rejects, instead of 0·inf = nan.
    ea, eb = jnp.exp(log_a + 2 * xi), jnp.exp(log_b - 2 * xi)
    return ea, eb, 0.5 * jnp.sum(ea + eb) - mu @ y

  def cond(state):
    _, _, it, done = state
    return (~done) & (it < max_iter)

  def body(state):
    mu, f, it, _ = state
    ea, eb, _ = parts(mu)
    grad = x @ (ea - eb) - y
    hess = (x * (2 * (ea + eb))) @ x.T
    # A tiny ridge keeps the solve defined where the curvature underflows in some directions.
    hess = hess + jnp.diag(pin + 1e-14 * jnp.trace(hess) / hess.shape[0] + 1e-300)
    step = jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(hess), grad)  # hess is SPD
    decrease = grad @ step
    converged = jnp.linalg.norm(grad) <= tol * y_norm
    # Once F cannot decrease by a representable amount the line search is blind, but then the
    # quadratic model is exact to rounding: take the full Newton step and stop.
    flat = decrease <= 1e-15 * (1.0 + jnp.abs(f))

    def ls_cond(t):
      f_new = parts(mu - t * step)[2]
      return ~(jnp.isfinite(f_new) & (f_new <= f - 0.25 * t * decrease)) & (t > 1e-30)

    t = jnp.where(flat, 1.0, jax.lax.while_loop(ls_cond, lambda t: 0.5 * t, jnp.ones_like(f)))
    mu_new = jnp.where(converged, mu, mu - t * step)
    return mu_new, parts(mu_new)[2], it + 1, converged | flat

  mu0 = jnp.zeros_like(y)
  mu, _, it, _ = jax.lax.while_loop(cond, body, (mu0, parts(mu0)[2], 0, jnp.bool_(False)))
  ea, eb, _ = parts(mu)
  beta = ea - eb
  return beta, it, jnp.linalg.norm(x_in @ beta - y_in) / y_norm


@functools.partial(jax.jit, static_argnames=("max_iter",))
def _newton_batched(x, y, log_a, log_b, tol, max_iter: int):
  return jax.vmap(lambda *args: _newton(*args, tol, max_iter))(x, y, log_a, log_b)


def solve(x, y, a, b, tol: float = 1e-12, max_iter: int = 100) -> tuple[np.ndarray, SolveInfo]:
  """argmin potential(β; A, B) s.t. Xβ = y, by damped Newton on the smooth dual, in float64.

  The stationarity condition is β_d = A_d e^{2ξ_d} − B_d e^{−2ξ_d} with ξ = Xᵀμ, so μ minimises the
  convex dual F, whose gradient is Xβ(μ) − y. Leading axes of x, y, a, b are batch axes (vmapped);
  returns β and per-problem Newton iterations and ‖Xβ − y‖ / ‖y‖.
  """
  x, y, a, b = (np.asarray(t, np.float64) for t in (x, y, a, b))
  batch = x.shape[:-2]
  merge = lambda t, k: t.reshape((-1,) + t.shape[t.ndim - k:])   # batch axes → one
  with np.errstate(divide="ignore"):
    log_a, log_b = np.log(a), np.log(b)
  with jax.enable_x64(True):
    beta, it, res = _newton_batched(merge(x, 2), merge(y, 1), merge(log_a, 1), merge(log_b, 1),
                                    tol, max_iter=max_iter)
    beta, it, res = np.asarray(beta), np.asarray(it), np.asarray(res)
  beta = beta.reshape(batch + beta.shape[-1:])
  return beta, SolveInfo(it.reshape(batch), res.reshape(batch))


# ---------------------------------------------------------------- ℓ-order and pretraining dependence


def coordinate_sensitivities(beta_ft, beta_pt, c, lam, gamma):
  """Per coordinate: q_d, β_d ∂q_d/∂β_d and β_PT,d ∂q_d/∂β_PT,d at κ_d = finetune_scale(β_PT,d)."""
  z = np.asarray(beta_ft, np.float64)
  bp = np.asarray(beta_pt, np.float64)
  kappa = finetune_scale(bp, c, lam, gamma)
  qd = q_kappa(z, kappa)
  with np.errstate(divide="ignore", invalid="ignore"):
    t = np.abs(z) / kappa
    z_dq = np.where(z == 0, 0.0, 0.5 * np.abs(z) * np.arcsinh(t))
    # κ ∂q/∂κ = −½ κ t² / (1 + sqrt(1 + t²)), and β_PT ∂κ/∂β_PT = (1+λ) β_PT² / sqrt(c² + β_PT²).
    kappa_dq = np.where(z == 0, 0.0, -0.5 * kappa * t ** 2 / (1 + np.sqrt(1 + t ** 2)))
    bp_dkappa = np.where(bp == 0, 0.0, (1 + lam) * bp ** 2 / np.sqrt(c ** 2 + bp ** 2))
    bp_dq = np.where(z == 0, 0.0, kappa_dq / kappa * bp_dkappa)
  return qd, z_dq, bp_dq


def ell_order_and_pd(beta_ft, beta_pt, c, lam, gamma) -> tuple[float, float]:
  """ℓ-order = d log Q(sβ)/d log s and PD = d log Q(β; sβ_PT)/d log s at s = 1, Q = Σ_d q_{k_d}(β_d).

  Both are Q-weighted averages of the coordinates' log-derivatives, so ℓ ∈ [1, 2] (1: |β|-like,
  rich; 2: β²-like, lazy) and PD ∈ [−1, 0] (−1: the penalty scales as 1/|β_PT|; 0: β_PT plays no
  role). Evaluate them at the fine-tuning solution β_FT.
  """
  qd, z_dq, bp_dq = coordinate_sensitivities(beta_ft, beta_pt, c, lam, gamma)
  total = np.sum(qd)
  if not np.isfinite(total) or total <= 0:
    return float("nan"), float("nan")
  return float(np.sum(z_dq) / total), float(np.sum(bp_dq) / total)


def pt_share(ell: float, pd: float) -> float:
  """PD / (1 − ℓ) ∈ [0, 1]: the (potential-weighted) share of the scale κ that pretraining sets."""
  if ell - 1 < 1e-9:
    return 0.0 if pd > -1e-9 else 1.0
  return float(min(max(pd / (1 - ell), 0.0), 1.0))


def regime(ell: float, pd: float) -> str:
  """I–IV from ℓ-order (lazy if ≥ LAZY_ELL) and the PT share (PT-dependent if ≥ DEP_SHARE)."""
  return REGIMES[(bool(ell >= LAZY_ELL), bool(pt_share(ell, pd) >= DEP_SHARE))]
