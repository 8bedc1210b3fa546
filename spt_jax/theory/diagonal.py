"""Diagonal linear networks: the model, PT/FT initialisations, teacher-student data and full-batch GD.

f(x) = βᵀx with β = v⁺∘w⁺ − v⁻∘w⁻: each coordinate is the difference of two two-layer scalar units.
Shapes are static and scales (c, λ, γ, ω) may be traced, so everything here jits and vmaps over seeds,
tasks and grid points. GD runs in float32; `implicit_bias` checks its solutions in float64.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class DiagonalNet(NamedTuple):
  """First-layer (w) and readout (v) weights of the + and − units, each of shape [D]."""
  w_plus: jax.Array
  v_plus: jax.Array
  w_minus: jax.Array
  v_minus: jax.Array


class Teachers(NamedTuple):
  """The PT and FT teacher vectors of one seed and their supports (boolean masks), each [D]."""
  beta_pt: jax.Array
  beta_ft: jax.Array
  pt_support: jax.Array
  ft_support: jax.Array


class TrainInfo(NamedTuple):
  steps: jax.Array      # GD steps taken (a multiple of the chunk size)
  rel_loss: jax.Array   # final ‖Xβ − y‖² / ‖y‖²
  time: jax.Array       # Σ step sizes: the gradient-flow time GD covered


# Everything below is jitted (shapes and support sizes static): eager vmaps of these functions would
# otherwise compile one small XLA program per primitive, which dominates the cost of small runs.


@jax.jit
def predictor(net: DiagonalNet) -> jax.Array:
  return net.w_plus * net.v_plus - net.w_minus * net.v_minus


# ---------------------------------------------------------------- Initialisations


@functools.partial(jax.jit, static_argnames=("dim",))
def pretrain_init(dim: int, c, lam) -> DiagonalNet:
  """Both units at w = sqrt(c(1+λ)/2), v = sqrt(c(1−λ)/2), so w²+v² = c, w²−v² = λc and β = 0.

  `lam` is relative to c (λ ∈ [−1, 1]); the absolute shape parameter of the brief is `lam * c`.
  """
  c = jnp.asarray(c, jnp.float32)
  lam = jnp.asarray(lam, jnp.float32)
  # max(., 0): at λ = ±1 rounding must not produce the square root of a tiny negative number.
  w = jnp.full((dim,), jnp.sqrt(jnp.maximum(c * (1 + lam) / 2, 0.0)))
  v = jnp.full((dim,), jnp.sqrt(jnp.maximum(c * (1 - lam) / 2, 0.0)))
  return DiagonalNet(w, v, w, v)


@jax.jit
def finetune_init(pretrained: DiagonalNet, gamma) -> DiagonalNet:
  """Keeps the learned first layer (both units get w⁺ + w⁻) and re-initialises readouts at γ/√2.

  Both units start equal, so fine-tuning starts at β = 0 whatever the pretrained β was.
  """
  w = pretrained.w_plus + pretrained.w_minus
  v = jnp.full_like(w, jnp.asarray(gamma, w.dtype) / np.sqrt(2.0))
  return DiagonalNet(w, v, w, v)


@jax.jit
def mirror_coefficients(net: DiagonalNet) -> tuple[jax.Array, jax.Array]:
  """(A, B) with β(t) = A e^{2ξ(t)} − B e^{−2ξ(t)} on the gradient flow started from `net`.

  Under the flow, (w + v) of the + unit scales by e^{ξ} and (w − v) by e^{−ξ}, with
  ξ(t) = −∫ ∂L/∂β dt; the − unit sees −ξ. So w⁺v⁺ = ((w⁺+v⁺)² e^{2ξ} − (w⁺−v⁺)² e^{−2ξ}) / 4 and
  likewise for w⁻v⁻, which gives A and B below (see docs/theory.md).
  """
  a = ((net.w_plus + net.v_plus) ** 2 + (net.w_minus - net.v_minus) ** 2) / 4
  b = ((net.w_plus - net.v_plus) ** 2 + (net.w_minus + net.v_minus) ** 2) / 4
  return a, b


# ---------------------------------------------------------------- Teacher-student data


def support_sizes(dim: int, rho_pt: float, rho_ft: float) -> tuple[int, int]:
  k_pt, k_ft = int(round(rho_pt * dim)), int(round(rho_ft * dim))
  if not (0 < k_pt <= dim and 0 < k_ft <= dim):
    raise ValueError(f"Supports of sizes {k_pt}, {k_ft} do not fit in D={dim}.")
  return k_pt, k_ft


def check_overlap(dim: int, rho_pt: float, rho_ft: float, omega: float) -> None:
  """Raises unless a fraction ω of an FT support of size ρ_FT·D fits in (and outside) the PT one."""
  k_pt, k_ft = support_sizes(dim, rho_pt, rho_ft)
  shared = int(round(omega * k_ft))
  if not 0.0 <= omega <= 1.0 or shared > k_pt or k_ft - shared > dim - k_pt:
    raise ValueError(f"ω={omega} with ρ_PT={rho_pt}, ρ_FT={rho_ft}, D={dim}: {shared} shared and "
                     f"{k_ft - shared} new FT coordinates do not fit next to {k_pt} PT ones.")


@jax.jit
def seed_keys(seed) -> dict[str, jax.Array]:
  """Independent keys of one seed; the teachers do not depend on ω, so tasks share β*_PT."""
  key = jax.random.key(seed)
  return {name: jax.random.fold_in(key, i)
          for i, name in enumerate(("teacher", "pt_inputs", "ft_inputs"))}


@functools.partial(jax.jit, static_argnames=("dim", "rho_pt", "rho_ft", "pt_amplitude", "ft_std"))
def make_teachers(key: jax.Array, dim: int, rho_pt: float, rho_ft: float, omega,
                  pt_amplitude: float = 1.0, ft_std: float | None = None) -> Teachers:
  """β*_PT = amplitude on ρ_PT·D coordinates; β*_FT ~ N(0, ft_std²) on ρ_FT·D coordinates.

  round(ω ρ_FT D) FT coordinates are drawn from the PT support and the rest from outside it, both
  uniformly. ft_std defaults to 1/sqrt(ρ_FT) so that ‖β*_FT‖² ≈ D. ω may be traced.
  """
  k_pt, k_ft = support_sizes(dim, rho_pt, rho_ft)
  ft_std = 1.0 / np.sqrt(rho_ft) if ft_std is None else ft_std
  perm_key, value_key = jax.random.split(key)
  perm = jax.random.permutation(perm_key, dim)
  # rank[i]: the position of coordinate i in a uniform random order. The first k_pt positions are
  # the PT support; FT takes the first `shared` of them and the `k_ft - shared` right after them.
  rank = jnp.zeros((dim,), jnp.int32).at[perm].set(jnp.arange(dim, dtype=jnp.int32))
  shared = jnp.round(jnp.asarray(omega, jnp.float32) * k_ft).astype(jnp.int32)
  pt_support = rank < k_pt
  ft_support = (rank < shared) | ((rank >= k_pt) & (rank < k_pt + k_ft - shared))
  beta_pt = jnp.where(pt_support, jnp.float32(pt_amplitude), 0.0)
  beta_ft = jnp.where(ft_support, ft_std * jax.random.normal(value_key, (dim,)), 0.0)
  return Teachers(beta_pt, beta_ft, pt_support, ft_support)


@functools.partial(jax.jit, static_argnames=("n", "dim"))
def sample_inputs(key: jax.Array, n: int, dim: int) -> jax.Array:
  """X with i.i.d. N(0, 1/D) entries. Datasets of one seed are nested: take the first N rows."""
  return jax.random.normal(key, (n, dim)) / np.sqrt(dim)


@jax.jit
def generalisation_error(beta: jax.Array, beta_star: jax.Array) -> jax.Array:
  """‖β − β*‖² / ‖β*‖², which is also test MSE / E[y²] for isotropic inputs."""
  return jnp.sum((beta - beta_star) ** 2, -1) / jnp.sum(beta_star ** 2, -1)


# ---------------------------------------------------------------- Full-batch gradient descent


def _power_iteration(x: jax.Array, scale: jax.Array, u: jax.Array, iters: int):
  """Top eigenpair of X diag(scale) Xᵀ by `iters` warm-started power steps; returns (λ, u)."""
  def body(_, carry):
    _, u = carry
    mu = x @ (scale * (x.T @ u))
    norm = jnp.linalg.norm(mu)
    return norm, mu / jnp.maximum(norm, 1e-30)
  return jax.lax.fori_loop(0, iters, body, (jnp.float32(0.0), u))


def _scale(net: DiagonalNet) -> jax.Array:
  """Σ_units (w² + v²): dβ/dt = −scale ∘ ∂L/∂β under gradient flow."""
  return net.w_plus ** 2 + net.v_plus ** 2 + net.w_minus ** 2 + net.v_minus ** 2


def _gd_step(carry, x, y, lam0, scale0, sigma2, lr, log_step, safety):
  """One GD step on L = ½‖Xβ − y‖², with a step size that keeps GD close to gradient flow.

  The Gauss-Newton curvature λ_max(X diag(scale) Xᵀ) is at most λ0 max_d scale_d / scale0_d and at
  most λ0 + max_d (scale_d − scale0_d)₊ ‖X‖², where λ0 is its value at the chunk's start (scale0);
  the second bound stays tight while tiny coordinates grow by large factors. The bilinear term adds
  ±|g|. η(safety·curvature + max|g|) ≤ 1 keeps GD stable; η max|g| ≤ log_step bounds the per-step
  change of log(w ± v), whose deviation from the flow's e^{∓ηg} is what biases GD away from the
  flow's solution.
  """
  net, time = carry
  g = x.T @ (x @ predictor(net) - y)
  scale = _scale(net)
  curvature = jnp.minimum(lam0 * jnp.max(scale / scale0),
                          lam0 + jnp.max(jnp.maximum(scale - scale0, 0.0)) * sigma2)
  g_max = jnp.max(jnp.abs(g))
  eta = jnp.minimum(lr, 1.0 / (safety * curvature + g_max))
  eta = jnp.minimum(eta, log_step / jnp.maximum(g_max, 1e-30))
  net = DiagonalNet(net.w_plus - eta * net.v_plus * g, net.v_plus - eta * net.w_plus * g,
                    net.w_minus + eta * net.v_minus * g, net.v_minus + eta * net.w_minus * g)
  return net, time + eta


@functools.partial(jax.jit, static_argnames=("max_steps", "chunk", "power_iters"))
def train(net: DiagonalNet, x: jax.Array, y: jax.Array, lr=0.5, tol=1e-7, log_step=0.1,
          safety=1.5, max_steps: int = 200_000, chunk: int = 25,
          power_iters: int = 6) -> tuple[DiagonalNet, TrainInfo]:
  """Full-batch GD until ‖Xβ − y‖² ≤ tol ‖y‖² or `max_steps`; vmap it over runs.

  Every `chunk` steps the curvature is re-estimated by warm-started power iteration (power
  iteration approaches λ_max from below, hence `safety`). Under vmap the loop runs until every run
  has stopped, and stopped runs are frozen (while_loop batching keeps their old state), so a run's
  result does not depend on its batch mates.
  """
  y_sq = jnp.maximum(jnp.sum(y ** 2), 1e-30)

  def rel_loss(net):
    r = x @ predictor(net) - y
    return jnp.sum(r ** 2) / y_sq

  def cond(carry):
    _, _, _, steps, loss = carry
    return (loss > tol) & (steps < max_steps)

  def body(carry):
    net, time, u, steps, _ = carry
    # A floor on scale0 keeps the growth ratio finite for coordinates that start at exactly 0.
    scale0 = jnp.maximum(_scale(net), 1e-30)
    lam0, u = _power_iteration(x, scale0, u, power_iters)
    step = lambda _, c: _gd_step(c, x, y, lam0, scale0, sigma2, lr, log_step, safety)
    net, time = jax.lax.fori_loop(0, chunk, step, (net, time))
    return net, time, u, steps + chunk, rel_loss(net)

  # First, longer power iterations from a generic vector: ‖X‖² (inflated, as power iteration
  # approaches it from below) and the starting eigenvector, which later chunks only refresh.
  u = jnp.ones((x.shape[0],), x.dtype) / np.sqrt(x.shape[0])
  sigma2, _ = _power_iteration(x, jnp.ones((x.shape[1],), x.dtype), u, 30)
  sigma2 = 1.2 * sigma2
  _, u = _power_iteration(x, jnp.maximum(_scale(net), 1e-30), u, 30)
  init = (net, jnp.float32(0.0), u, jnp.int32(0), rel_loss(net))
  net, time, _, steps, loss = jax.lax.while_loop(cond, body, init)
  return net, TrainInfo(steps, loss, time)
