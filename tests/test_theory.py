"""Diagonal-network theory: GD vs the implicit-bias minimiser, ℓ-order/PD, data, the sweep."""
from __future__ import annotations

import functools
import importlib.util
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from spt_jax.theory import diagonal as dn
from spt_jax.theory import experiments
from spt_jax.theory import implicit_bias as ib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (c, λ/c, γ): lazy and rich, λ of both signs, readouts small and large relative to the first layer.
SETTINGS = np.array([(1.0, 0.0, 1.0), (0.1, 0.5, 0.3), (1e-2, -0.5, 1.0), (0.3, 0.9, 0.1),
                     (1e-3, 0.0, 0.0), (1.0, -0.9, 3.0)], np.float32)


@pytest.fixture(scope="module")
def small_problem():
  """D = 30: PT on 20 samples (so β_PT ≠ β*_PT and the ± units differ), FT on 15."""
  dim, keys = 30, dn.seed_keys(0)
  teachers = dn.make_teachers(keys["teacher"], dim, 0.2, 0.2, 0.5)
  x_pt = dn.sample_inputs(keys["pt_inputs"], 20, dim)
  x_ft = dn.sample_inputs(keys["ft_inputs"], 15, dim)
  return teachers, x_pt, x_pt @ teachers.beta_pt, x_ft, x_ft @ teachers.beta_ft


# One compiled GD loop for every (batched) training run below; the data are shared by the batch.
_train = jax.jit(jax.vmap(functools.partial(dn.train, tol=1e-10, log_step=0.01),
                          in_axes=(0, None, None)))


@pytest.fixture(scope="module")
def pt_ft_runs(small_problem):
  """For every setting: PT by GD, the FT re-initialisation, FT by GD, and FT without re-init."""
  _, x_pt, y_pt, x_ft, y_ft = small_problem
  c, lam, gamma = (jnp.asarray(v) for v in SETTINGS.T)
  pt, _ = _train(jax.vmap(lambda c, lam: dn.pretrain_init(x_pt.shape[1], c, lam))(c, lam), x_pt, y_pt)
  init = jax.vmap(dn.finetune_init)(pt, gamma)
  ft, info = _train(init, x_ft, y_ft)
  # Fine-tuning without the re-initialisation: unequal units and β(0) ≠ 0.
  cont, cont_info = _train(pt, x_ft, y_ft)
  return pt, init, ft, info, cont, cont_info


def test_gd_matches_implicit_bias_minimiser(small_problem, pt_ft_runs):
  _, _, _, x_ft, y_ft = small_problem
  pt, init, ft, info, _, _ = pt_ft_runs
  assert np.all(np.asarray(info.rel_loss) <= 1e-9)
  # After PT the two units of a coordinate differ, which the FT re-initialisation undoes.
  assert np.all(np.max(np.abs(pt.w_plus - pt.w_minus), axis=1) > 0.05 * np.max(pt.w_plus, axis=1))
  np.testing.assert_array_equal(init.w_plus, init.w_minus)
  a, b = dn.mirror_coefficients(init)
  xs = np.broadcast_to(np.asarray(x_ft), (len(SETTINGS),) + x_ft.shape)
  ys = np.broadcast_to(np.asarray(y_ft), (len(SETTINGS),) + y_ft.shape)
  beta_theory, solve_info = ib.solve(xs, ys, a, b)
  assert np.all(solve_info.rel_residual < 1e-8)
  beta_gd = np.asarray(dn.predictor(ft))
  rel = np.linalg.norm(beta_gd - beta_theory, axis=1) / np.linalg.norm(beta_theory, axis=1)
  assert np.all(rel < 0.02), rel
  # The minimiser is a different point in each setting: the test is not passing trivially.
  assert np.min(np.linalg.norm(beta_theory[:, None] - beta_theory[None], axis=-1)
                + 1e9 * np.eye(len(SETTINGS))) > 1e-2


def test_gd_matches_offset_potential_without_reinit(small_problem, pt_ft_runs):
  """Continuing from the pretrained weights (A ≠ B, β(0) ≠ 0) needs the −¼ log(A/B) β term."""
  _, _, _, x_ft, y_ft = small_problem
  pt, _, _, _, cont, cont_info = pt_ft_runs
  assert np.all(np.asarray(cont_info.rel_loss) <= 1e-9)
  a, b = (np.asarray(t, np.float64) for t in dn.mirror_coefficients(pt))
  assert np.max(np.abs(np.log(a / b))) > 0.1
  xs = np.broadcast_to(np.asarray(x_ft), (len(SETTINGS),) + x_ft.shape)
  ys = np.broadcast_to(np.asarray(y_ft), (len(SETTINGS),) + y_ft.shape)
  beta_theory, _ = ib.solve(xs, ys, a, b)
  beta_gd = np.asarray(dn.predictor(cont))
  rel = np.linalg.norm(beta_gd - beta_theory, axis=1) / np.linalg.norm(beta_theory, axis=1)
  assert np.all(rel < 0.02), rel
  # And the minimiser of the potential without the offset is measurably different.
  kappa = 2 * np.sqrt(a * b)
  beta_no_offset, _ = ib.solve(xs, ys, kappa / 2, kappa / 2)
  assert np.max(np.linalg.norm(beta_no_offset - beta_theory, axis=1)
                / np.linalg.norm(beta_theory, axis=1)) > 0.05


def test_solver_minimises_the_potential_on_the_constraint_set():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(8, 20)) / np.sqrt(20)
  y = x @ rng.normal(size=20)
  a, b = rng.uniform(0.01, 1.0, size=20), rng.uniform(0.01, 1.0, size=20)
  beta, _ = ib.solve(x, y, a, b)
  np.testing.assert_allclose(x @ beta, y, atol=1e-10)
  null = np.linalg.svd(x)[2][8:]          # directions that keep Xβ = y
  f0 = ib.potential(beta, a, b)
  for _ in range(20):
    step = 1e-3 * rng.normal(size=12) @ null
    assert ib.potential(beta + step, a, b) > f0
  # q_k with k = 16AB matches the brief's form, including its ¼√k scale.
  z, k = np.linspace(-3, 3, 13), 16 * 0.3 * 0.7
  np.testing.assert_allclose(ib.q_kappa(z, np.sqrt(k) / 2), ib.q(z, k), rtol=1e-12, atol=1e-15)


def test_finetune_scale_formula_is_exact_on_the_flow():
  """Weights anywhere on the PT gradient flow (built from its closed form) give the brief's c_FT."""
  rng = np.random.default_rng(1)
  for c, lam, gamma in [(1e-6, 0.99, 0.0), (1e-3, -0.5, 1.0), (1.0, 0.0, 10.0), (0.5, -1.0, 2.0)]:
    xi = rng.normal(scale=4.0, size=50)
    w0, v0 = np.sqrt(c * (1 + lam) / 2), np.sqrt(c * (1 - lam) / 2)
    # (w + v) scales by e^{ξ} and (w − v) by e^{−ξ} for the + unit; the − unit sees −ξ.
    sp, dp = (w0 + v0) * np.exp(xi), (w0 - v0) * np.exp(-xi)
    sm, dm = (w0 + v0) * np.exp(-xi), (w0 - v0) * np.exp(xi)
    net = dn.DiagonalNet((sp + dp) / 2, (sp - dp) / 2, (sm + dm) / 2, (sm - dm) / 2)
    beta_pt = net.w_plus * net.v_plus - net.w_minus * net.v_minus
    w = net.w_plus + net.w_minus
    a = ((w + gamma / np.sqrt(2)) ** 2 + (w - gamma / np.sqrt(2)) ** 2) / 4
    np.testing.assert_allclose(2 * a, ib.finetune_scale(beta_pt, c, lam, gamma), rtol=1e-9)


def test_finetune_scale_formula_after_gd_pretraining(small_problem, pt_ft_runs):
  pt, init, *_ = pt_ft_runs
  a, b = (np.asarray(t, np.float64) for t in dn.mirror_coefficients(init))
  beta_pt = np.asarray(dn.predictor(pt), np.float64)
  for i, (c, lam, gamma) in enumerate(SETTINGS.astype(np.float64)):
    np.testing.assert_allclose(2 * np.sqrt(a[i] * b[i]), ib.finetune_scale(beta_pt[i], c, lam, gamma),
                               rtol=0.02)


# ---------------------------------------------------------------- ℓ-order and PD


def test_ell_order_and_pd_stay_in_range():
  rng = np.random.default_rng(2)
  for _ in range(200):
    c, lam = 10 ** rng.uniform(-8, 1), rng.uniform(-1, 1)
    gamma = rng.choice([0.0, 10 ** rng.uniform(-3, 2)])
    beta_ft = rng.normal(size=40) * 10 ** rng.uniform(-4, 3)
    beta_pt = rng.normal(size=40) * (rng.uniform(size=40) < 0.5)
    ell, pd = ib.ell_order_and_pd(beta_ft, beta_pt, c, lam, gamma)
    assert 1 - 1e-9 <= ell <= 2 + 1e-9 and -1 - 1e-9 <= pd <= 1e-9, (c, lam, gamma, ell, pd)


def test_ell_order_and_pd_limits():
  rng = np.random.default_rng(3)
  beta_pt = np.where(np.arange(50) < 25, 1.0, 0.0)
  beta_ft = rng.normal(size=50) * beta_pt
  # Tiny scale, no PT contribution (λ = −c): rich (ℓ → 1) and PT-independent (PD = 0).
  ell, pd = ib.ell_order_and_pd(beta_ft, beta_pt, 1e-6, -1.0, 1e-6)
  assert ell < 1.06 and pd == 0.0 and ib.regime(ell, pd) == "I"
  # Large readouts: lazy (ℓ → 2) and PT-independent.
  ell, pd = ib.ell_order_and_pd(beta_ft, beta_pt, 1e-6, 0.99, 100.0)
  assert ell > 1.9999 and pd > -1e-3 and ib.regime(ell, pd) == "III"
  # PT-dominated scale (c → 0, λ → c, γ = 0) with small FT weights: κ ≈ 2|β_PT| ≫ |β_FT|.
  ell, pd = ib.ell_order_and_pd(1e-3 * beta_ft, beta_pt, 1e-9, 0.99, 0.0)
  assert ell > 1.999 and pd < -0.999 and ib.regime(ell, pd) == "II"
  # The same initialisation with FT weights ≫ κ: rich and still PT-dependent (PD between −1 and 0).
  ell, pd = ib.ell_order_and_pd(30 * beta_ft, beta_pt, 1e-9, -0.9, 0.0)
  assert ell < 1.5 and -0.5 < pd < -0.1 and ib.regime(ell, pd) == "IV"


def test_ell_order_and_pd_at_the_minimiser_follow_the_scale():
  """At the FT solution itself: rich at tiny scale, lazy at large γ."""
  rng = np.random.default_rng(4)
  x = rng.normal(size=(20, 60)) / np.sqrt(60)
  beta_star = np.where(rng.uniform(size=60) < 0.1, rng.normal(size=60) * 3, 0.0)
  beta_pt = np.where(np.arange(60) < 12, 1.0, 0.0)
  out = {}
  for name, (c, lam, gamma) in dict(rich=(1e-6, -1.0, 1e-4), lazy=(1e-6, -1.0, 30.0)).items():
    kappa = ib.finetune_scale(beta_pt, c, lam, gamma)
    beta, _ = ib.solve(x, x @ beta_star, kappa / 2, kappa / 2)
    out[name] = ib.ell_order_and_pd(beta, beta_pt, c, lam, gamma)
  assert out["rich"][0] < 1.1 and out["lazy"][0] > 1.999
  assert out["rich"][1] == out["lazy"][1] == 0.0


# ---------------------------------------------------------------- Data


@pytest.mark.parametrize("omega", [0.0, 0.5, 1.0])
def test_teacher_supports_and_overlap(omega):
  dim, rho_pt, rho_ft = 400, 0.1, 0.05
  for seed in range(3):
    t = dn.make_teachers(dn.seed_keys(seed)["teacher"], dim, rho_pt, rho_ft, omega)
    pt, ft = np.asarray(t.pt_support), np.asarray(t.ft_support)
    assert pt.sum() == 40 and ft.sum() == 20 and (pt & ft).sum() == round(omega * 20)
    np.testing.assert_array_equal(np.asarray(t.beta_pt), np.where(pt, 1.0, 0.0))
    assert np.all((np.asarray(t.beta_ft) != 0) == ft)
  # The same seed gives the same teachers; the PT teacher does not depend on the FT task.
  a = dn.make_teachers(dn.seed_keys(7)["teacher"], dim, rho_pt, rho_ft, omega)
  b = dn.make_teachers(dn.seed_keys(7)["teacher"], dim, rho_pt, rho_ft, omega)
  c = dn.make_teachers(dn.seed_keys(7)["teacher"], dim, rho_pt, 0.1, 1.0 - omega)
  np.testing.assert_array_equal(a.beta_ft, b.beta_ft)
  np.testing.assert_array_equal(a.beta_pt, c.beta_pt)


def test_teacher_statistics_and_inputs():
  dim = 20_000
  t = dn.make_teachers(dn.seed_keys(0)["teacher"], dim, 0.1, 0.05, 0.5)
  values = np.asarray(t.beta_ft)[np.asarray(t.ft_support)]
  # ‖β*_FT‖²/D = mean of 1000 values² / (1/ρ_FT), a χ² mean: within 5 of its √(2/1000) stds of 1.
  assert abs(np.mean(values ** 2) * 0.05 - 1.0) < 5 * np.sqrt(2 / len(values))
  assert abs(np.mean(values)) < 5 / np.sqrt(0.05 * len(values))
  x = np.asarray(dn.sample_inputs(dn.seed_keys(0)["ft_inputs"], 50, 400))
  assert abs(x.var() * 400 - 1.0) < 0.05
  np.testing.assert_array_equal(x[:10], np.asarray(dn.sample_inputs(dn.seed_keys(0)["ft_inputs"],
                                                                  50, 400))[:10])
  with pytest.raises(ValueError, match="do not fit"):
    dn.check_overlap(100, 0.05, 0.1, 1.0)   # 10 shared FT coordinates in a PT support of 5


# ---------------------------------------------------------------- The sweep


def _config(arg=None):
  spec = importlib.util.spec_from_file_location(
      "regimes", os.path.join(ROOT, "configs", "theory", "regimes.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def test_configs_and_unknown_keys():
  paper = _config("paper")
  assert paper.dim == 5000 and paper.num_seeds == 14 and len(paper.alphas) == 11
  assert len(paper.settings) == 33
  experiments.check_config(_config())
  with pytest.raises(ValueError, match="Unknown variant"):
    _config("tiny")
  config = _config()
  config.typo = 1
  with pytest.raises(ValueError, match="typo"):
    experiments.check_config(config)


def test_sweep_end_to_end(tmp_path):
  config = _config()
  config.update(dim=40, num_seeds=2, alphas=(0.25,),
                settings=((1e-4, -0.9, 0.0), (1.0, 0.0, 10.0)))
  config.tasks = dict(same=config.tasks.same.to_dict(), disjoint=config.tasks.disjoint.to_dict())
  results = experiments.run(config, str(tmp_path))
  for name in ("results.json", "table.md", "table.csv", "error_vs_alpha.png", "regimes.png"):
    assert (tmp_path / name).stat().st_size > 0
  saved = json.loads((tmp_path / "results.json").read_text())
  assert len(saved["records"]) == 2 * 2   # tasks × settings
  for r in saved["records"]:
    assert 0 <= r["err_gd"] and r["converged"] == 1.0 and r["gd_vs_theory"] < 0.05
  labels = saved["settings"]
  assert labels[experiments.setting_name(1.0, 0.0, 10.0)]["regime"] == "III"
  assert {c["task"] for c in saved["claims"]} == {"same", "disjoint"}
  assert "### Claims" in (tmp_path / "table.md").read_text()
  assert results["wall_time_sec"] > 0
