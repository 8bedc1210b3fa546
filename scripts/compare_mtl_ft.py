r"""The diagonal-network simulator of spt_jax.theory next to the one in Nico31415/MTL_FT.

MTL_FT's `multi-task/diagonal_network3.py` and `diagonal_network3_finetune.py` (PyTorch) train the
same model, β = u⁺v⁺ − u⁻v⁻, and define the invariants `compute_c` (u⁺u⁻ + v⁺v⁻) and
`compute_lambda` (v⁺² − u⁺²), an analytical fine-tuning scale (`compute_analytical_c_ft`), the
implicit-bias regulariser and its SLSQP minimiser (`regularizer.py`) and ℓ-order / feature dependence
(`lorder_fd_plots.py`). This script runs both on the same teachers and inputs and prints a Markdown
table (docs/theory.md, "A second implementation: MTL_FT"):

  python scripts/compare_mtl_ft.py --mtl-ft /tmp/mtl_ft --torch-python /work/venv_torch/bin/python

It runs under the spt-jax venv and calls itself under `--torch-python` (a venv with torch, numpy,
scipy, matplotlib; torch is not a dependency of spt-jax) for MTL_FT's side; the two halves exchange
arrays through an .npz file. Parameter mapping (their names on the left, spt-jax's on the right):

  v± (first layer, kept at FT)  = w±;   u± (readout, reset at FT) = v±
  compute_c at the PT init      = c;    compute_lambda at the PT init = λ·c (λ relative in spt-jax)
  FT readout u± = γ_MTL         = γ/√2 (spt-jax resets readouts to γ/√2, so γ_MTL² = γ²/2)
  loss ½ mean_n (their)         = ½ sum_n / N (ours): lr_MTL = N·η gives the same GD path as η.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import tempfile

import numpy as np

# (c, λ relative to c, γ) and (task, ω, ρ_FT) of docs/theory.md's CPU default; PT always exact
# (α_PT = 2). Small D: MTL_FT's GD is a Python loop at a fixed step size.
SETTINGS = ((1e-6, 0.0, 0.0), (1.0, 0.0, 0.0))
TASKS = (("same", 1.0, 0.1), ("disjoint", 0.0, 0.1))
RHO_PT, PT_ALPHA = 0.1, 2.0
PT_TOL, FT_TOL = 1e-6, 1e-5


# ---------------------------------------------------------------- MTL_FT's side (torch venv)


def _theirs(mtl_dir: str, path_in: str, path_out: str) -> None:
  """Pretrain → fine-tune with MTL_FT's DiagonalNetwork, their SGD step and their re-initialisation."""
  os.environ.setdefault("MPLBACKEND", "Agg")
  sys.path.insert(0, mtl_dir)
  import torch
  import diagonal_network3 as dn3                 # sets torch's default dtype to float64
  import diagonal_network3_finetune as dn3ft
  import lorder_fd_plots as lfd
  import regularizer

  data = dict(np.load(path_in))
  out = {}
  for r in range(int(data["runs"])):
    p = lambda k: data[f"{r}/{k}"]
    c, lam, gamma, max_steps, chunk = (float(v) for v in p("scalars"))
    dim = p("beta_pt_star").shape[0]

    def network(x, beta_star, eta, w0, v0):
      """Their DiagonalNetwork with our data (x [N, D]) and initial weights instead of its own."""
      n = x.shape[0]
      cfg = dn3.NetworkConfig(d=dim, o=1, N=n, T=int(chunk), lr=eta * n, seed=0)
      with contextlib.redirect_stdout(io.StringIO()):   # it prints an invariant check
        net = dn3.DiagonalNetwork(cfg)
      net.X = x.T.astype(np.float64)
      net.y = (x @ beta_star)[None, :].astype(np.float64)
      net.X_torch, net.y_torch = torch.tensor(net.X), torch.tensor(net.y)
      with torch.no_grad():
        for name, val in (("v_plus", w0), ("v_minus", w0), ("u_plus", v0), ("u_minus", v0)):
          getattr(net, name).copy_(torch.tensor(val, dtype=torch.float64).reshape(dim, 1))
      return net

    def fit(net, tol):
      """Their `train()` in chunks (it keeps per-step histories, dropped between chunks)."""
      y_sq = float(np.sum(net.y ** 2))
      steps = 0
      while True:
        rel = float(np.sum((dn3ft.compute_beta(net).T @ net.X - net.y) ** 2)) / y_sq
        if rel <= tol or steps >= max_steps or not np.isfinite(rel):
          return steps, rel
        net.train()
        net._init_histories()
        steps += int(chunk)

    # Pretraining from spt-jax's symmetric initialisation, mapped onto their weights.
    w0 = np.full(dim, np.sqrt(max(c * (1 + lam) / 2, 0.0)))
    v0 = np.full(dim, np.sqrt(max(c * (1 - lam) / 2, 0.0)))
    pre = network(p("x_pt"), p("beta_pt_star"), float(p("eta_pt")), w0, v0)
    res = {"c_pt": dn3.compute_c(pre).ravel(), "lambda_pt": dn3.compute_lambda(pre).ravel()}
    res["pt_steps"], res["pt_rel_loss"] = fit(pre, PT_TOL)
    beta_aux = dn3ft.compute_beta(pre).ravel()
    c_pt_final, lambda_pt_final = dn3.compute_c(pre).ravel(), dn3.compute_lambda(pre).ravel()

    # Fine-tuning: the re-initialisation of diagonal_network3_finetune.py's __main__ (readouts u± set
    # to γ_MTL, first layers v± both set to the pretrained v⁺ + v⁻), with γ_MTL = γ/√2.
    gamma_mtl = gamma / np.sqrt(2.0)
    with torch.no_grad():
      v_sum = (pre.v_plus + pre.v_minus).detach().numpy().ravel()
    ft = network(p("x_ft"), p("beta_ft_star"), float(p("eta_ft")), v_sum, np.full(dim, gamma_mtl))
    c_ft = dn3.compute_c(ft).ravel()
    res["c_ft"], res["lambda_ft"] = c_ft, dn3.compute_lambda(ft).ravel()
    with np.errstate(divide="ignore", invalid="ignore"):
      res["c_ft_analytical"] = dn3ft.compute_analytical_c_ft(lambda_pt_final, c_pt_final, gamma_mtl,
                                                             beta_aux)
    res["ft_steps"], res["ft_rel_loss"] = fit(ft, FT_TOL)
    beta_ft = dn3ft.compute_beta(ft).ravel()
    res["beta_pt"], res["beta_ft"] = beta_aux, beta_ft

    # Their implicit bias: SLSQP on regularizer_Q with the conserved c of fine-tuning.
    np.random.seed(0)     # solve_constrained_opt starts from np.random.randn
    x_ft = p("x_ft")
    beta_q, _ = regularizer.solve_constrained_opt(x_ft.T, x_ft @ p("beta_ft_star"), c_ft)
    res["beta_slsqp"] = beta_q
    # Their per-coordinate ℓ-order and feature dependence at the fine-tuned β (γ in their units).
    with np.errstate(divide="ignore", invalid="ignore"):
      lf = np.array([lfd.compute_l_order_and_fd(lam * c, c, ba, bm, gamma_mtl)
                     for ba, bm in zip(beta_aux, beta_ft)])
    res["l_order"], res["fd"] = lf[:, 0], lf[:, 1]
    for k, v in res.items():
      out[f"{r}/{k}"] = np.asarray(v, np.float64)
    print(f"  MTL_FT run {r}: PT {res['pt_steps']} steps, FT {res['ft_steps']} steps", flush=True)
  np.savez(path_out, **out)


# ---------------------------------------------------------------- spt-jax's side and the table


def _ours(args):
  from spt_jax.theory import diagonal as dn
  from spt_jax.theory import implicit_bias as ib

  dim = args.dim
  runs, inputs = [], {}
  for seed in args.seeds:
    keys = dn.seed_keys(seed)
    x_pt = dn.sample_inputs(keys["pt_inputs"], int(round(PT_ALPHA * dim)), dim)
    x_ft_all = dn.sample_inputs(keys["ft_inputs"], max(int(round(a * dim)) for a in args.alphas), dim)
    for task, omega, rho_ft in TASKS:
      teachers = dn.make_teachers(keys["teacher"], dim, RHO_PT, rho_ft, omega)
      for c, lam, gamma in SETTINGS:
        pre, pt_info = dn.train(dn.pretrain_init(dim, c, lam), x_pt, x_pt @ teachers.beta_pt,
                                tol=PT_TOL)
        beta_pt = np.asarray(dn.predictor(pre), np.float64)
        for alpha in args.alphas:
          x_ft = x_ft_all[: int(round(alpha * dim))]
          init = dn.finetune_init(pre, gamma)
          ft, ft_info = dn.train(init, x_ft, x_ft @ teachers.beta_ft, tol=FT_TOL)
          a, b = (np.asarray(t, np.float64) for t in dn.mirror_coefficients(init))
          x64 = np.asarray(x_ft, np.float64)
          y64 = x64 @ np.asarray(teachers.beta_ft, np.float64)
          beta_th = ib.solve(x64, y64, a, b)[0]
          # MTL_FT's regulariser corresponds to κ = 2 c_FT (see _tables); solved exactly here.
          beta_th2 = ib.solve(x64, y64, 2 * a, 2 * b)[0]
          kappa = ib.finetune_scale(beta_pt, c, lam, gamma)
          runs.append(dict(seed=seed, task=task, c=c, lam=lam, gamma=gamma, alpha=alpha,
                           n=x_ft.shape[0], beta_pt_star=np.asarray(teachers.beta_pt, np.float64),
                           beta_ft_star=np.asarray(teachers.beta_ft, np.float64),
                           beta_pt=beta_pt, beta_ft=np.asarray(dn.predictor(ft), np.float64),
                           beta_theory=beta_th, beta_theory_2k=beta_th2, kappa=kappa,
                           ell_pd=ib.ell_order_and_pd(np.asarray(dn.predictor(ft)), beta_pt, c, lam,
                                                      gamma),
                           pt_steps=int(pt_info.steps), ft_steps=int(ft_info.steps),
                           ft_rel_loss=float(ft_info.rel_loss)))
          inputs[len(runs) - 1] = (np.asarray(x_pt, np.float64), x64)
  return runs, inputs


def _step_size(x, scale_bound):
  """A fixed η (in sum-loss units) under the stability limit 2 / (scale · ‖X‖²) by a factor 4."""
  return 0.5 / (scale_bound * np.linalg.norm(x, 2) ** 2)


def _ell(z, kappa):
  """Per-coordinate ℓ-order β q'(β) / q(β) of q with scale κ (it depends on β/κ only)."""
  from spt_jax.theory import implicit_bias as ib
  return 0.5 * np.abs(z) * np.arcsinh(np.abs(z) / kappa) / ib.q_kappa(z, kappa)


def _tables(runs, theirs) -> str:
  """Simulations (errors, weights, implicit bias), then formulas evaluated on MTL_FT's own weights."""
  from spt_jax.theory import implicit_bias as ib
  err = lambda b, s: float(np.sum((b - s) ** 2) / np.sum(s ** 2))
  rel = lambda a, b: float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))
  sim = ["| setting | task | α | N | error spt-jax | error MTL_FT | β_PT: MTL vs ours | β_FT: MTL vs ours "
         "| β_FT vs argmin Q, κ = c_FT: ours, MTL | MTL β_FT vs argmin of MTL's regulariser: exact, "
         "SLSQP |", "|---" * 10 + "|"]
  form = ["| setting | task | α | compute_c vs c_FT formula | compute_analytical_c_ft vs formula: "
          "β_PT > 0, β_PT < 0 | ℓ: MTL − ours | ℓ: MTL − ours at 2κ | FD − PD | FD − PD at 2κ |",
          "|---" * 9 + "|"]
  for r, run in enumerate(runs):
    t = {k[len(f"{r}/"):]: v for k, v in theirs.items() if k.startswith(f"{r}/")}
    name = f"c={run['c']:g}, λ={run['lam']:g}c, γ={run['gamma']:g} | {run['task']} | {run['alpha']:g}"
    sim.append(
        f"| {name} | {run['n']} | {err(run['beta_ft'], run['beta_ft_star']):.4f} "
        f"| {err(t['beta_ft'], run['beta_ft_star']):.4f} | {rel(t['beta_pt'], run['beta_pt']):.1e} "
        f"| {rel(t['beta_ft'], run['beta_ft']):.1e} "
        f"| {rel(run['beta_ft'], run['beta_theory']):.1e}, {rel(t['beta_ft'], run['beta_theory']):.1e} "
        f"| {rel(t['beta_ft'], run['beta_theory_2k']):.1e}, {rel(t['beta_ft'], t['beta_slsqp']):.1e} |")
    # The formulas on MTL_FT's own pretrained and fine-tuned β, so GD differences do not enter.
    bp, bf = t["beta_pt"], t["beta_ft"]
    kappa = ib.finetune_scale(bp, run["c"], run["lam"], run["gamma"])
    c_rel = float(np.max(np.abs(t["c_ft"] - kappa) / kappa))
    with np.errstate(divide="ignore", invalid="ignore"):
      ana = np.abs(t["c_ft_analytical"] - kappa) / kappa
    ana_txt = ", ".join(f"{np.max(ana[m]):.1e}" if m.any() else "–" for m in (bp > 0, bp < 0))
    on = run["beta_ft_star"] != 0          # where fine-tuning puts weight
    qd, z_dq, bp_dq = ib.coordinate_sensitivities(bf, bp, run["c"], run["lam"], run["gamma"])
    ell, pd = (z_dq / qd)[on], (bp_dq / qd)[on]
    share = (pd / (1 - ell))                # β_PT ∂κ/∂β_PT / κ, the same at κ and 2κ
    ell2 = _ell(bf, 2 * kappa)[on]
    d_ell, d_fd = t["l_order"][on] - ell, t["fd"][on] - pd
    d_ell2, d_fd2 = t["l_order"][on] - ell2, t["fd"][on] - (1 - ell2) * share
    med = lambda d: f"{np.median(d):+.3f} (max {np.max(np.abs(d)):.3f})"
    form.append(f"| {name} | {c_rel:.1e} | {ana_txt} | {med(d_ell)} | {np.max(np.abs(d_ell2)):.1e} "
                f"| {med(d_fd)} | {np.max(np.abs(d_fd2)):.1e} |")
  return "\n".join(sim) + "\n\n" + "\n".join(form) + "\n"


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--mtl-ft", required=True,
                      help="A checkout of Nico31415/MTL_FT (the repository root or its multi-task/).")
  parser.add_argument("--torch-python", default="/work/venv_torch/bin/python",
                      help="Python of a venv with torch, numpy, scipy and matplotlib.")
  parser.add_argument("--dim", type=int, default=100)
  parser.add_argument("--seeds", type=int, nargs="+", default=[0])
  parser.add_argument("--alphas", type=float, nargs="+", default=[0.1, 0.3])
  parser.add_argument("--chunk", type=int, default=500, help="MTL_FT steps between loss checks.")
  parser.add_argument("--max-steps", type=int, default=200_000, help="Per phase, for MTL_FT.")
  parser.add_argument("--keep", help="Also save both sides' arrays here (ours.npz, theirs.npz).")
  parser.add_argument("--theirs", nargs=2, metavar=("IN", "OUT"), help=argparse.SUPPRESS)
  args = parser.parse_args()
  mtl_dir = args.mtl_ft
  if os.path.isdir(os.path.join(mtl_dir, "multi-task")):
    mtl_dir = os.path.join(mtl_dir, "multi-task")
  if args.theirs:
    _theirs(mtl_dir, *args.theirs)
    return

  runs, inputs = _ours(args)
  arrays = {"runs": np.int64(len(runs))}
  for r, run in enumerate(runs):
    x_pt, x_ft = inputs[r]
    # Bounds on Σ(w² + v²) at the end of each phase: 2 sqrt(κ² + β²) per coordinate.
    s_pt = 2 * np.sqrt(run["c"] ** 2 + np.max(run["beta_pt_star"] ** 2))
    s_ft = 2 * np.sqrt(np.max(run["kappa"]) ** 2 + np.max(run["beta_ft_star"] ** 2))
    arrays.update({f"{r}/x_pt": x_pt, f"{r}/x_ft": x_ft, f"{r}/beta_pt_star": run["beta_pt_star"],
                   f"{r}/beta_ft_star": run["beta_ft_star"],
                   f"{r}/eta_pt": _step_size(x_pt, s_pt), f"{r}/eta_ft": _step_size(x_ft, s_ft),
                   f"{r}/scalars": np.array([run["c"], run["lam"], run["gamma"], args.max_steps,
                                             args.chunk], np.float64)})
  with tempfile.TemporaryDirectory() as tmp:
    path_in, path_out = os.path.join(tmp, "in.npz"), os.path.join(tmp, "out.npz")
    np.savez(path_in, **arrays)
    subprocess.run([args.torch_python, os.path.abspath(__file__), "--mtl-ft", mtl_dir,
                    "--theirs", path_in, path_out], check=True)
    theirs = dict(np.load(path_out))
  if args.keep:
    os.makedirs(args.keep, exist_ok=True)
    np.savez(os.path.join(args.keep, "theirs.npz"), **theirs)
    np.savez(os.path.join(args.keep, "ours.npz"), **{f"{r}/{k}": np.asarray(v) for r, run in
                                                     enumerate(runs) for k, v in run.items()})
  print(f"D = {args.dim}, seeds {args.seeds}, ρ_PT = {RHO_PT}, α_PT = {PT_ALPHA}; "
        f"spt-jax: adaptive GD (float32); MTL_FT: its SGD at a fixed step (float64).\n")
  for r, run in enumerate(runs):
    t = {k[len(f"{r}/"):]: v for k, v in theirs.items() if k.startswith(f"{r}/")}
    print(f"- c={run['c']:g}, λ={run['lam']:g}c, γ={run['gamma']:g}, {run['task']}, α={run['alpha']:g}: "
          f"max|compute_c − c| = {np.max(np.abs(t['c_pt'] - run['c'])):.1e}, "
          f"max|compute_lambda − λc| = {np.max(np.abs(t['lambda_pt'] - run['lam'] * run['c'])):.1e} "
          f"at the PT init; GD steps PT/FT: spt-jax {run['pt_steps']}/{run['ft_steps']}, MTL_FT "
          f"{int(t['pt_steps'])}/{int(t['ft_steps'])}; ℓ-order, PD (spt-jax) = "
          f"{run['ell_pd'][0]:.2f}, {run['ell_pd'][1]:.2f}")
  print()
  print(_tables(runs, theirs))


if __name__ == "__main__":
  main()
