r"""Generalisation error of pretrain → fine-tune diagonal networks vs α, over (c, λ, γ) and tasks.

  python -m spt_jax.theory.experiments --config=configs/theory/regimes.py --workdir=runs/theory
  python -m spt_jax.theory.experiments --config=configs/theory/regimes.py:paper --workdir=runs/paper

Per seed: teachers β*_PT, β*_FT (`diagonal.make_teachers`), PT inputs (α_PT·D rows) and FT inputs (the
first α·D rows of one draw, so the datasets of a seed are nested in α). Pretraining by GD from
`pretrain_init(c, λ)` on β*_PT; fine-tuning by GD from `finetune_init(·, γ)` on β*_FT; error
‖β − β*_FT‖² / ‖β*_FT‖². With `config.theory`, the implicit-bias minimiser of every run is also
computed exactly. Writes WORKDIR/{results.json, table.md, table.csv, error_vs_alpha.png, regimes.png}.
"""
from __future__ import annotations

import csv
import functools
import json
import os
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from tqdm import tqdm

from spt_jax.theory import diagonal as dn
from spt_jax.theory import implicit_bias as ib

CONFIG_KEYS = {"seed", "num_seeds", "dim", "alphas", "rho_pt", "pt_amplitude", "ft_std", "tasks",
               "regime_task", "settings", "gd", "theory"}
TASK_KEYS = {"omega", "rho_ft", "pt_alpha", "paper_best"}
GD_KEYS = {"lr", "log_step", "tol", "pt_tol", "max_steps"}
REGIME_COLORS = {"I": "tab:blue", "II": "tab:orange", "III": "tab:green", "IV": "tab:red"}


# ---------------------------------------------------------------- Batched PT and FT


@functools.partial(jax.jit, static_argnames=("max_steps",))
def _pretrain(c, lam, x, beta_star, lr, tol, log_step, max_steps: int):
  """PT of every seed (leading axis of x [S, N, D] and beta_star [S, D])."""
  def one(x, beta_star):
    return dn.train(dn.pretrain_init(x.shape[1], c, lam), x, x @ beta_star, lr=lr, tol=tol,
                    log_step=log_step, max_steps=max_steps)
  return jax.vmap(one)(x, beta_star)


@functools.partial(jax.jit, static_argnames=("max_steps",))
def _finetune(pretrained, gamma, x, beta_star, lr, tol, log_step, max_steps: int):
  """FT of every (task, seed): pretrained [T, S, D] nets, x [S, N, D], beta_star [T, S, D].

  Returns the FT nets, their TrainInfo and the mirror coefficients of their initialisations.
  """
  def one(net, x, beta_star):
    init = dn.finetune_init(net, gamma)
    net, info = dn.train(init, x, x @ beta_star, lr=lr, tol=tol, log_step=log_step,
                         max_steps=max_steps)
    return net, info, dn.mirror_coefficients(init)
  return jax.vmap(jax.vmap(one), in_axes=(0, None, 0))(pretrained, x, beta_star)


# ---------------------------------------------------------------- The sweep


def check_config(config: ml_collections.ConfigDict) -> None:
  """Raises on unknown or missing keys and on tasks or settings that cannot be run."""
  def check(keys, known, where):
    unknown, missing = set(keys) - known, known - set(keys)
    if unknown or missing:
      raise ValueError(f"{where}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}.")
  check(config.keys(), CONFIG_KEYS, "config")
  check(config.gd.keys(), GD_KEYS, "config.gd")
  if not config.tasks:
    raise ValueError("config.tasks is empty.")
  for name, task in config.tasks.items():
    check(task.keys(), TASK_KEYS, f"config.tasks.{name}")
    dn.check_overlap(config.dim, config.rho_pt, task.rho_ft, task.omega)
    if task.paper_best not in ("", *ib.REGIME_NAMES):
      raise ValueError(f"config.tasks.{name}.paper_best={task.paper_best!r} is not a regime.")
  if config.regime_task not in config.tasks:
    raise ValueError(f"config.regime_task={config.regime_task!r} is not one of config.tasks.")
  for s in config.settings:
    c, lam, gamma = s
    if not (c > 0 and -1 <= lam <= 1 and gamma >= 0) or (lam == -1 and gamma == 0):
      raise ValueError(f"Setting (c, λ/c, γ) = {tuple(s)} is invalid (c > 0, λ/c ∈ [−1, 1], γ ≥ 0, "
                       f"and λ = −c with γ = 0 starts fine-tuning at a saddle with all weights 0).")
  if not config.alphas or min(config.alphas) * config.dim < 1:
    raise ValueError(f"Every α·D must be ≥ 1 (α = {config.alphas}, D = {config.dim}).")


def _teachers(config, seeds) -> dict[str, dn.Teachers]:
  """Teachers [S, D] per task; the PT teacher is the same for all tasks by construction."""
  keys = jax.vmap(lambda s: dn.seed_keys(s)["teacher"])(seeds)
  out = {}
  for name, task in config.tasks.items():
    make = lambda k: dn.make_teachers(k, config.dim, config.rho_pt, task.rho_ft, task.omega,
                                      config.pt_amplitude, config.ft_std or None)
    out[name] = jax.vmap(make)(keys)
  return out


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Runs the sweep; writes and returns the results (see the module docstring)."""
  check_config(config)
  os.makedirs(workdir, exist_ok=True)
  start = time.time()
  dim, gd = config.dim, config.gd
  seeds = jnp.arange(config.seed, config.seed + config.num_seeds)
  task_names = list(config.tasks)
  settings = [tuple(float(v) for v in s) for s in config.settings]
  alphas = sorted(float(a) for a in config.alphas)
  sizes = [max(1, int(round(a * dim))) for a in alphas]
  teachers = _teachers(config, seeds)
  beta_pt_star = teachers[task_names[0]].beta_pt
  beta_ft_star = jnp.stack([teachers[t].beta_ft for t in task_names])            # [T, S, D]
  x_ft = jax.vmap(lambda s: dn.sample_inputs(dn.seed_keys(s)["ft_inputs"], max(sizes), dim))(seeds)

  # Pretraining depends on (c, λ, α_PT) only.
  pt_alphas = sorted({float(config.tasks[t].pt_alpha) for t in task_names})
  pt_shapes = sorted({(c, lam) for c, lam, _ in settings})
  pretrained, pt_info = {}, {}
  for pt_alpha in pt_alphas:
    n_pt = max(1, int(round(pt_alpha * dim)))
    x_pt = jax.vmap(lambda s: dn.sample_inputs(dn.seed_keys(s)["pt_inputs"], n_pt, dim))(seeds)
    for c, lam in tqdm(pt_shapes, desc=f"pretraining (α_PT={pt_alpha:g})"):
      net, info = _pretrain(c, lam, x_pt, beta_pt_star, gd.lr, gd.pt_tol, gd.log_step,
                            max_steps=gd.max_steps)
      pretrained[pt_alpha, c, lam] = net
      pt_info[pt_alpha, c, lam] = jax.tree.map(np.asarray, info)

  records = []
  progress = tqdm(total=len(settings) * len(alphas), desc="fine-tuning")
  for c, lam, gamma in settings:
    nets = jax.tree.map(lambda *t: jnp.stack(t), *[
        pretrained[float(config.tasks[t].pt_alpha), c, lam] for t in task_names])  # [T, S, D]
    beta_pt = np.asarray(dn.predictor(nets), np.float64)
    for alpha, n in zip(alphas, sizes):
      x = x_ft[:, :n]
      ft_nets, info, (a, b) = _finetune(nets, gamma, x, beta_ft_star, gd.lr, gd.tol, gd.log_step,
                                        max_steps=gd.max_steps)
      beta_gd = np.asarray(dn.predictor(ft_nets), np.float64)
      theory = None
      if config.theory:
        # One task at a time: the seeds' inputs are shared by the tasks, so this never copies them.
        x64 = np.asarray(x, np.float64)
        theory = np.stack([ib.solve(x64, np.einsum("snd,sd->sn", x64, np.asarray(beta_ft_star[ti])),
                                    np.asarray(a[ti]), np.asarray(b[ti]))[0]
                           for ti in range(len(task_names))])
      for ti, task in enumerate(task_names):
        records.append(_record(config, task, (c, lam, gamma), alpha, n, beta_gd[ti],
                               None if theory is None else theory[ti],
                               np.asarray(beta_ft_star[ti], np.float64), beta_pt[ti],
                               jax.tree.map(lambda t: np.asarray(t[ti]), info),
                               pt_info[float(config.tasks[task].pt_alpha), c, lam]))
      progress.update()
  progress.close()

  results = summarise(config, records)
  results["wall_time_sec"] = time.time() - start
  results["pt_error"] = {
      f"alpha_pt={k[0]:g},c={k[1]:g},lam={k[2]:g}": float(np.mean(dn.generalisation_error(
          dn.predictor(v), beta_pt_star))) for k, v in pretrained.items()}
  write(results, workdir)
  return results


def _record(config, task, setting, alpha, n, beta_gd, beta_theory, beta_star, beta_pt, info,
            pt_info) -> dict:
  """One (task, setting, α) cell: per-seed errors and metrics reduced to means and stds."""
  c, lam, gamma = setting
  err_gd = np.sum((beta_gd - beta_star) ** 2, -1) / np.sum(beta_star ** 2, -1)
  metrics = np.array([ib.ell_order_and_pd(bg, bp, c, lam, gamma) for bg, bp in zip(beta_gd, beta_pt)])
  rec = dict(task=task, omega=config.tasks[task].omega, rho_ft=config.tasks[task].rho_ft,
             pt_alpha=config.tasks[task].pt_alpha, c=c, lam=lam, gamma=gamma, alpha=alpha, n=n,
             err_gd=float(err_gd.mean()), err_gd_std=float(err_gd.std()),
             ell=float(np.nanmean(metrics[:, 0])), pd=float(np.nanmean(metrics[:, 1])),
             steps_max=int(info.steps.max()), rel_loss_max=float(info.rel_loss.max()),
             converged=float(np.mean(info.rel_loss <= config.gd.tol)),
             pt_converged=float(np.mean(pt_info.rel_loss <= config.gd.pt_tol)))
  if beta_theory is not None:
    err_th = np.sum((beta_theory - beta_star) ** 2, -1) / np.sum(beta_star ** 2, -1)
    gap = np.linalg.norm(beta_gd - beta_theory, axis=-1) / np.linalg.norm(beta_theory, axis=-1)
    rec.update(err_theory=float(err_th.mean()), gd_vs_theory=float(gap.max()))
  return rec


# ---------------------------------------------------------------- Summaries and claims


def setting_name(c: float, lam: float, gamma: float) -> str:
  return f"c={c:g}, λ={lam:g}c, γ={gamma:g}"


def summarise(config, records: list[dict]) -> dict:
  """Regime labels, the best setting per task, and the paper's claims checked against the runs."""
  settings = sorted({(r["c"], r["lam"], r["gamma"]) for r in records},
                    key=lambda s: [tuple(v) for v in config.settings].index(s))
  key = lambda r: (r["c"], r["lam"], r["gamma"])
  by = lambda task, s: [r for r in records if r["task"] == task and key(r) == s]
  labels = {}
  for s in settings:
    rows = by(config.regime_task, s)
    ell, pd = np.nanmean([r["ell"] for r in rows]), np.nanmean([r["pd"] for r in rows])
    labels[s] = dict(ell=float(ell), pd=float(pd), regime=ib.regime(ell, pd))
  mean_err = {(t, s): float(np.mean([r["err_gd"] for r in by(t, s)]))
              for t in config.tasks for s in settings}
  tasks, claims = {}, []
  for t, task in config.tasks.items():
    ranked = sorted(settings, key=lambda s: mean_err[t, s])
    best = ranked[0]
    tasks[t] = dict(best=setting_name(*best), best_regime=labels[best]["regime"],
                    mean_err={setting_name(*s): mean_err[t, s] for s in ranked})
    if task.paper_best:
      # The margin: the best setting of the claimed regime against the best of all other regimes.
      inside = [s for s in ranked if labels[s]["regime"] == task.paper_best]
      outside = [s for s in ranked if labels[s]["regime"] != task.paper_best]
      claims.append(dict(
          task=t, claim=f"regime {task.paper_best} generalises best on '{t}'",
          holds=labels[best]["regime"] == task.paper_best, best=setting_name(*best),
          best_regime=labels[best]["regime"], best_err=mean_err[t, best],
          best_claimed=setting_name(*inside[0]) if inside else None,
          best_claimed_err=mean_err[t, inside[0]] if inside else None,
          best_other=setting_name(*outside[0]) if outside else None,
          best_other_regime=labels[outside[0]]["regime"] if outside else None,
          best_other_err=mean_err[t, outside[0]] if outside else None))
  for t, task in config.tasks.items():
    if task.pt_alpha < 1:
      claims.append(_negative_lambda_claim(t, settings, mean_err))
  return dict(config=config.to_dict(), settings={setting_name(*s): labels[s] for s in settings},
              tasks=tasks, claims=claims, records=records)


def _negative_lambda_claim(task: str, settings, mean_err) -> dict:
  """'With imperfect pretraining, negative λ helps': at each (c, γ) with both signs of λ present,
  does the best λ < 0 beat the best λ ≥ 0?"""
  groups = {}
  for c, lam, gamma in settings:
    groups.setdefault((c, gamma), []).append(lam)
  wins, comparisons = 0, []
  for (c, gamma), lams in sorted(groups.items()):
    neg, pos = [l for l in lams if l < 0], [l for l in lams if l >= 0]
    if neg and pos:
      e_neg = min(mean_err[task, (c, l, gamma)] for l in neg)
      e_pos = min(mean_err[task, (c, l, gamma)] for l in pos)
      wins += e_neg < e_pos
      comparisons.append(dict(c=c, gamma=gamma, best_negative=e_neg, best_nonnegative=e_pos))
  return dict(task=task, claim=f"with imperfect pretraining ('{task}'), λ < 0 beats λ ≥ 0 "
                               f"at fixed (c, γ)",
              holds=(wins == len(comparisons)) if comparisons else None, wins=wins,
              comparisons=comparisons)


# ---------------------------------------------------------------- Outputs


def write(results: dict, workdir: str) -> None:
  with open(os.path.join(workdir, "results.json"), "w") as f:
    json.dump(results, f, indent=1)
  records = results["records"]
  with open(os.path.join(workdir, "table.csv"), "w", newline="") as f:
    fields = list(records[0])
    writer = csv.DictWriter(f, fieldnames=fields + ["regime"])
    writer.writeheader()
    for r in records:
      name = setting_name(r["c"], r["lam"], r["gamma"])
      writer.writerow(dict(r, regime=results["settings"][name]["regime"]))
  with open(os.path.join(workdir, "table.md"), "w") as f:
    f.write(markdown_table(results))
  plot(results, workdir)


def markdown_table(results: dict) -> str:
  """Mean GD error per task × setting × α (best per column in bold), then the claims."""
  records, labels = results["records"], results["settings"]
  cfg = results["config"]
  alphas = sorted({r["alpha"] for r in records})
  lines = [f"D = {cfg['dim']}, {cfg['num_seeds']} seeds; entries: ‖β − β*_FT‖² / ‖β*_FT‖² after "
           f"GD fine-tuning, mean over seeds; regime and (ℓ, PD) from task "
           f"'{cfg['regime_task']}'.", ""]
  for task, t in cfg["tasks"].items():
    lines.append(f"### {task}: ω = {t['omega']:g}, ρ_FT = {t['rho_ft']:g}, α_PT = {t['pt_alpha']:g}")
    lines.append("")
    lines.append("| setting | regime | ℓ | PD | " + " | ".join(f"α={a:g}" for a in alphas)
                 + " | mean |")
    lines.append("|---" * (5 + len(alphas)) + "|")
    cells = {(r["c"], r["lam"], r["gamma"], r["alpha"]): r["err_gd"]
             for r in records if r["task"] == task}
    settings = list(dict.fromkeys((r["c"], r["lam"], r["gamma"]) for r in records))
    best = {a: min(cells[s + (a,)] for s in settings) for a in alphas}
    means = {s: np.mean([cells[s + (a,)] for a in alphas]) for s in settings}
    for s in settings:
      lab = labels[setting_name(*s)]
      fmt = lambda v, b: f"**{v:.3f}**" if v <= b else f"{v:.3f}"
      lines.append(f"| {setting_name(*s)} | {lab['regime']} | {lab['ell']:.2f} | {lab['pd']:.2f} | "
                   + " | ".join(fmt(cells[s + (a,)], best[a]) for a in alphas)
                   + f" | {fmt(means[s], min(means.values()))} |")
    lines.append("")
  lines.append("### Claims")
  lines.append("")
  lines.append("Errors are means over α and seeds (the `mean` column).")
  lines.append("")
  for cl in results["claims"]:
    if "best" in cl:
      detail = (f"best: {cl['best']} (regime {cl['best_regime']}, {cl['best_err']:.3f}); best of "
                f"regime {cl['claim'].split()[1]}: {cl['best_claimed_err']:.3f}; best of the other "
                f"regimes: {cl['best_other']} (regime {cl['best_other_regime']}, "
                f"{cl['best_other_err']:.3f})" if cl["best_claimed"] and cl["best_other"] else
                f"best: {cl['best']} (regime {cl['best_regime']})")
    else:
      detail = f"{cl['wins']}/{len(cl['comparisons'])} (c, γ) groups: " + "; ".join(
          f"c={g['c']:g}, γ={g['gamma']:g}: {g['best_negative']:.3f} vs {g['best_nonnegative']:.3f}"
          for g in cl["comparisons"])
    verdict = {True: "HOLDS", False: "DOES NOT HOLD", None: "NOT TESTED"}[cl["holds"]]
    lines.append(f"- {verdict}: {cl['claim']} ({detail})")
  gaps = [r["gd_vs_theory"] for r in records if "gd_vs_theory" in r]
  if gaps:
    lines.append("")
    lines.append(f"GD vs implicit-bias minimiser: max ‖β_GD − β_theory‖/‖β_theory‖ = {max(gaps):.3g}, "
                 f"median {np.median(gaps):.3g}.")
  lines.append(f"Wall time: {results['wall_time_sec']:.0f} s.")
  return "\n".join(lines) + "\n"


def plot(results: dict, workdir: str) -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  records, labels, cfg = results["records"], results["settings"], results["config"]
  tasks = list(cfg["tasks"])
  settings = list(dict.fromkeys((r["c"], r["lam"], r["gamma"]) for r in records))
  styles = ["-", "--", ":", "-."]
  fig, axes = plt.subplots(1, len(tasks), figsize=(3.6 * len(tasks), 3.4), sharey=True,
                           squeeze=False)
  for ax, task in zip(axes[0], tasks):
    t = cfg["tasks"][task]
    count = {}   # settings of one regime share a colour and differ in line style
    for s in settings:
      regime = labels[setting_name(*s)]["regime"]
      count[regime] = count.get(regime, -1) + 1
      rows = sorted((r for r in records if r["task"] == task and (r["c"], r["lam"], r["gamma"]) == s),
                    key=lambda r: r["alpha"])
      a = np.array([r["alpha"] for r in rows])
      m, sd = np.array([r["err_gd"] for r in rows]), np.array([r["err_gd_std"] for r in rows])
      ax.plot(a, m, styles[count[regime] % len(styles)], marker="o", ms=3,
              color=REGIME_COLORS[regime], label=f"{regime}: {setting_name(*s)}")
      ax.fill_between(a, m - sd, m + sd, color=REGIME_COLORS[regime], alpha=0.1, lw=0)
      if "err_theory" in rows[0]:
        ax.plot(a, [r["err_theory"] for r in rows], "x", ms=3, color="k", alpha=0.4)
    ax.set_xscale("log")
    ax.set_title(f"{task}: ω={t['omega']:g}, ρ_FT={t['rho_ft']:g}, α_PT={t['pt_alpha']:g}",
                 fontsize=8)
    ax.set_xlabel("α = N/D")
  axes[0, 0].set_ylabel("‖β − β*‖² / ‖β*‖²  (GD; × = theory)")
  axes[0, -1].legend(fontsize=6, loc="upper right")
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "error_vs_alpha.png"), dpi=130)
  plt.close(fig)

  # ℓ-order vs PD: one point per (setting, task), averaged over α and seeds, coloured by its own
  # regime. Reachable points lie above PD = −(ℓ − 1) (κ set by pretraining alone); the dashed
  # lines are the regime boundaries ℓ = LAZY_ELL and PD = −DEP_SHARE (ℓ − 1).
  fig, ax = plt.subplots(figsize=(5.2, 4.2))
  ell_line = np.linspace(1, 2, 50)
  ax.fill_between(ell_line, -1.02, 1 - ell_line, color="0.9", lw=0)
  ax.plot(ell_line, 1 - ell_line, "k-", lw=0.6)
  ax.plot(ell_line, -ib.DEP_SHARE * (ell_line - 1), color="gray", lw=0.6, ls="--")
  ax.axvline(ib.LAZY_ELL, color="gray", lw=0.6, ls="--")
  markers = "osD^vP*X"
  for i, task in enumerate(tasks):
    for s in settings:
      rows = [r for r in records if r["task"] == task and (r["c"], r["lam"], r["gamma"]) == s]
      ell, pd = np.nanmean([r["ell"] for r in rows]), np.nanmean([r["pd"] for r in rows])
      ax.scatter(ell, pd, marker=markers[i % len(markers)], color=REGIME_COLORS[ib.regime(ell, pd)],
                 s=22, label=task if s == settings[0] else None, edgecolors="k", linewidths=0.3)
  for regime, (x, y) in dict(I=(1.02, -0.08), II=(1.6, -0.6), III=(1.55, -0.08),
                             IV=(1.2, -0.3)).items():
    ax.text(x, y, f"{regime}: {ib.REGIME_NAMES[regime]}", color=REGIME_COLORS[regime], fontsize=7)
  ax.set_xlim(0.98, 2.02)
  ax.set_ylim(-1.02, 0.02)
  ax.set_xlabel("ℓ-order  (1 rich/sparse … 2 lazy/ℓ2)")
  ax.set_ylabel("PD  (0 PT-independent … −1 PT-dependent)")
  ax.legend(fontsize=6, loc="lower left")  # the unreachable corner
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "regimes.png"), dpi=130)
  plt.close(fig)


def main(argv: Sequence[str]) -> None:
  from absl import flags
  if len(argv) > 1:
    raise ValueError(f"Unexpected arguments: {argv[1:]}")
  results = run(flags.FLAGS.config, flags.FLAGS.workdir)
  print(markdown_table(results))


if __name__ == "__main__":
  from absl import app, flags
  from ml_collections import config_flags
  config_flags.DEFINE_config_file("config", None,
                                  "configs/theory/regimes.py, optionally with ':paper'.",
                                  lock_config=True)
  flags.DEFINE_string("workdir", None, "Where results.json, table.md, table.csv and figures go.")
  flags.mark_flags_as_required(["config", "workdir"])
  app.run(main)
