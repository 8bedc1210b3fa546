r"""Fine-tuning regimes of diagonal linear networks (Anguita et al., 2026): generalisation error vs α.

  python -m spt_jax.theory.experiments --config=configs/theory/regimes.py --workdir=runs/theory
  python -m spt_jax.theory.experiments --config=configs/theory/regimes.py:paper --workdir=runs/paper

The default is sized for 2 CPU cores (D = 500, 3 seeds, 8 values of α, a hand-picked set of (c, λ, γ)
that covers the four regimes); `:paper` is the paper's size (D = 5000, 14 seeds, 11 values of α, the
full grid c × λ × γ), which needs an accelerator. λ is relative to c (λ = −1 is the brief's λ = −c).
Every field can be overridden, e.g. `--config.num_seeds=5 --config.tasks.same.pt_alpha=0.3`.
"""
import itertools

import ml_collections
import numpy as np


def task(omega: float, rho_ft: float, pt_alpha: float,
         paper_best: str = "") -> ml_collections.ConfigDict:
  """A fine-tuning task: FT support ρ_FT·D, a fraction ω of it in the PT support; PT on α_PT·D samples.

  `paper_best`: the regime the paper says generalises best on this task ("" for none).
  """
  return ml_collections.ConfigDict(dict(omega=omega, rho_ft=rho_ft, pt_alpha=pt_alpha,
                                        paper_best=paper_best))


def get_config(arg=None):
  config = ml_collections.ConfigDict()
  config.seed = 0                 # seeds are seed, seed + 1, ..., seed + num_seeds - 1
  config.num_seeds = 3
  config.dim = 500
  config.alphas = tuple(float(a) for a in np.round(np.geomspace(0.01, 0.5, 8), 4))
  config.rho_pt = 0.1
  config.pt_amplitude = 1.0       # β*_PT on its support
  config.ft_std = 0.0             # std of the nonzeros of β*_FT; 0 means 1/sqrt(ρ_FT), so ‖β*_FT‖² ≈ D
  # α_PT = 2 > 1 makes pretraining exact (β_PT = β*_PT) whatever (c, λ); "imperfect" pretrains on
  # α_PT = 0.2, where the PT solution depends on the PT inductive bias and misses PT features.
  config.tasks = ml_collections.ConfigDict(dict(
      disjoint=task(0.0, 0.1, 2.0, "I"),
      half=task(0.5, 0.1, 2.0),
      same=task(1.0, 0.1, 2.0, "II"),
      subset=task(1.0, 0.03, 2.0, "IV"),
      imperfect=task(1.0, 0.1, 0.2),
  ))
  # The task whose fine-tuning solutions give each setting its regime label (ℓ-order and PD depend
  # on the solution; on this task it uses the PT features whenever the potential lets it).
  config.regime_task = "same"
  # (c, λ/c, γ). λ = −1 with γ = 0 is excluded: all weights start at 0 and nothing is learned.
  config.settings = (
      (1e-6, -1.0, 0.01),   # κ = 5e-5 everywhere: rich (ℓ1-like) and PT-independent
      (1.0, -0.99, 0.0),    # large c but a tiny first layer: κ ≈ 0.02 on and off the PT support
      (1e-6, -0.9, 0.0),    # κ ≈ 0.1|β_PT|: rich on the PT features, ~1e-7 elsewhere
      (1e-6, 0.0, 0.0),     # κ ≈ |β_PT|
      (1e-6, 0.99, 0.0),    # κ ≈ 2|β_PT|: the most PT-dependent
      (1e-6, -1.0, 1.0),    # κ = ½ everywhere: PT-independent, between rich and lazy
      (1.0, 0.0, 0.0),      # large c: κ ≈ 2–2.4 everywhere
      (1.0, 0.99, 10.0),    # large γ: κ ≈ 55, lazy and PT-independent
  )
  config.gd = ml_collections.ConfigDict(dict(
      lr=0.5,            # the paper's learning rate, here an upper bound on the adaptive step
      log_step=0.1,      # bound on η·max|∂L/∂β|: keeps GD within ~1% of gradient flow's solution
      tol=1e-5,          # stop at ‖Xβ − y‖² ≤ tol ‖y‖² (fine-tuning)
      pt_tol=1e-6,       # the same for pretraining
      max_steps=200_000,
  ))
  config.theory = True   # also solve the implicit-bias problem exactly for every run (float64)
  if arg == "paper":
    config.num_seeds = 14
    config.dim = 5000
    config.alphas = tuple(float(a) for a in np.round(np.geomspace(0.01, 0.5, 11), 4))
    config.settings = tuple(
        (c, lam, gamma) for c, lam, gamma in itertools.product(
            (1e-6, 1e-3, 1.0), (-1.0, -0.99, 0.0, 0.99), (0.0, 1.0, 10.0))
        if not (lam == -1.0 and gamma == 0.0))
  elif arg:
    raise ValueError(f"Unknown variant {arg!r} for configs/theory/regimes.py; known: 'paper'.")
  return config
