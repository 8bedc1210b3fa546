"""The implicit bias of fine-tuning a diagonal linear network, its minimiser, ℓ-order and PD.

Gradient flow on ½‖Xβ − y‖² from weights with mirror coefficients (A, B) (`diagonal.mirror_coefficients`)
converges, if it interpolates, to

  argmin_β Σ_d q_{k_d}(β_d) − ¼ log(A_d / B_d) β_d   s.t.  Xβ = y,     k_d = 16 A_d B_d,

  q_k(z) = (√k / 4) (1 − sqrt(1 + 4z²/k) + (2z/√k) asinh(2z/√k)).

Fine-tuning starts with equal units, so A = B (no linear term) and √k_d / 2 = κ_d = 2A_d, which equals
the brief's c_FT,d = c(1+λ)(1 + sqrt(1 + (β_PT,d/c)²)) + γ²/2 (`finetune_scale`; docs/theory.md derives
both). Everything here is float64 numpy: the dual Hessian spans many orders of magnitude at small c.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

# (ℓ-order, PD) thresholds of the regime labels: "lazy" above LAZY_ELL, "PT-dependent" below DEP_PD.
LAZY_ELL = 1.75
DEP_PD = -0.25
REGIMES = {(False, False): "I", (True, True): "II", (True, False): "III", (False, True): "IV"}
REGIME_NAMES = {"I": "rich, PT-independent", "II": "lazy, PT-dependent",
                "III": "lazy, PT-independent", "IV": "rich, PT-dependent"}


class SolveInfo(NamedTuple):
  iterations: int
  rel_residual: float   # ‖Xβ − y‖ / ‖y‖ at the returned β


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


def solve(x, y, a, b, tol: float = 1e-11, max_iter: int = 500) -> tuple[np.ndarray, SolveInfo]:
  """argmin potential(β; A, B) s.t. Xβ = y, by damped Newton on the smooth dual.

  The stationarity condition is β_d = A_d e^{2ξ_d} − B_d e^{−2ξ_d} with ξ = Xᵀμ, so μ minimises the
  convex dual F(μ) = Σ_d ½(A_d e^{2ξ_d} + B_d e^{−2ξ_d}) − μᵀy, whose gradient is Xβ(μ) − y.
  """
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  with np.errstate(divide="ignore"):
    log_a, log_b = np.log(np.asarray(a, np.float64)), np.log(np.asarray(b, np.float64))
  y_norm = max(np.linalg.norm(y), 1e-300)

  def parts(mu):
    xi = x.T @ mu
    with np.errstate(over="ignore"):
      ea, eb = np.exp(log_a + 2 * xi), np.exp(log_b - 2 * xi)
    return ea, eb, 0.5 * np.sum(ea + eb) - mu @ y

  mu = np.zeros(x.shape[0])
  ea, eb, f = parts(mu)
  for it in range(max_iter):
    grad = x @ (ea - eb) - y
    if np.linalg.norm(grad) <= tol * y_norm:
      break
    hess = (x * (2 * (ea + eb))) @ x.T
    # A tiny ridge keeps the solve defined where the curvature underflows in some directions.
    hess[np.diag_indices_from(hess)] += 1e-14 * np.trace(hess) / len(hess) + 1e-300
    step = np.linalg.solve(hess, grad)
    t, decrease = 1.0, grad @ step
    while True:
      ea_new, eb_new, f_new = parts(mu - t * step)
      if np.isfinite(f_new) and f_new <= f - 0.25 * t * decrease:
        break
      t *= 0.5
      if t < 1e-20:
        raise FloatingPointError(f"Newton line search stalled at iteration {it}.")
    mu, ea, eb, f = mu - t * step, ea_new, eb_new, f_new
  beta = ea - eb
  return beta, SolveInfo(it, float(np.linalg.norm(x @ beta - y) / y_norm))


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


def regime(ell: float, pd: float) -> str:
  """I–IV from where (ℓ-order, PD) lies relative to (LAZY_ELL, DEP_PD)."""
  return REGIMES[(bool(ell >= LAZY_ELL), bool(pd <= DEP_PD))]
