"""How compressed an encoder's representation is, and how much of it fine-tuning keeps: the
participation ratio (PR) and the effective number of shared dimensions (ENSD) of pooled encoder
outputs, the signatures Anguita et al. (arXiv 2602.20062) read their deep-network results with.

For features X [n, d] (one pooled encoder output per example, centred over the n examples) with
feature covariance C = XᵀX:

  PR(X)      = tr(C)² / tr(C²) = (Σ λ_i)² / Σ λ_i²  (λ: C's eigenvalues). k equal eigenvalues give
               k; one dominant direction gives 1 (the participation ratio, e.g. Gao et al. 2017,
               "A theory of multineuronal dimensionality, dynamics and measurement").
  ENSD(X, Y) = PR(X) · PR(Y) · tr(K̂_X K̂_Y),  K = XXᵀ (the examples' Gram matrix), K̂ = K / tr(K)
             = tr(K_X) tr(K_Y) ‖XᵀY‖²_F / (‖XᵀX‖²_F ‖YᵀY‖²_F)
               (Giaffar, Rullán Buxó & Aoi, "The effective number of shared dimensions"; the
               PR · PR · TR form of their tutorial, github.com/camillerb/ENSD). ENSD(X, X) = PR(X); two
               representations spanning orthogonal directions of the examples share 0; X spanning k
               equal directions and Y m of the same kind, s of them shared, give s.

The code that appears to accompany Anguita et al. (github.com/Nico31415/MTL_FT,
`experiments/cifar/ensd.py`; not linked from the paper) computes the same product in feature space,
tr(Ĉ_X Ĉ_Y) with C = XᵀX, on uncentred features: a different number (it needs the two
representations to share their features, as one layer before and after fine-tuning does).
`ensd(x, y, space="features", centre=False)` is that variant, for comparing with their numbers.

Computed on the same fixed validation sample for two parameter sets of a phase, such as the loaded
(init checkpoint) and the fine-tuned (best) parameters of a fine-tuning: a "pretraining-dependent
rich" fine-tuning shows a lower PR after fine-tuning with a high ENSD to the loaded representation.
"""
from __future__ import annotations

import jax
import numpy as np


def _centred(x) -> np.ndarray:
  x = np.asarray(x, np.float64).reshape(len(x), -1)
  return x - x.mean(0, keepdims=True)


def participation_ratio(x) -> float:
  """PR of features x [n, d] (centred here)."""
  x = _centred(x)
  c = x.T @ x
  return float(np.trace(c) ** 2 / max(np.sum(c * c), 1e-300))


def ensd(x, y, *, space: str = "examples", centre: bool = True) -> float:
  """ENSD of features x [n, d] and y [n, d'] of the same n examples (module docstring): over the
  examples' Gram matrices (`space='examples'`, Giaffar et al.), or over the feature covariances
  (`space='features'`, d = d', the MTL_FT code's variant); centred over the examples unless
  `centre` is False."""
  prepare = _centred if centre else (lambda a: np.asarray(a, np.float64).reshape(len(a), -1))
  x, y = prepare(x), prepare(y)
  if len(x) != len(y):
    raise ValueError(f"ENSD compares the same examples: {len(x)} rows against {len(y)}.")
  cx, cy = x.T @ x, y.T @ y
  if space == "examples":
    cross = x.T @ y
    shared = np.sum(cross * cross)          # tr(K_X K_Y) = ‖XᵀY‖²_F
  elif space == "features":
    if x.shape[1] != y.shape[1]:
      raise ValueError(f"ENSD in feature space needs the same features: {x.shape[1]} against "
                       f"{y.shape[1]}.")
    shared = np.sum(cx * cy.T)              # tr(C_X C_Y)
  else:
    raise ValueError(f"space={space!r} must be 'examples' or 'features'.")
  return float(np.trace(cx) * np.trace(cy) * shared
               / max(np.sum(cx * cx) * np.sum(cy * cy), 1e-300))


def pooled_features(model, params, inputs, batch_size: int = 64) -> np.ndarray:
  """[n, D]: the pooled encoder output the classifier reads (pair features for document pairs),
  for `inputs` [n, ...], computed in batches."""
  def features(module, x):
    h, mask = module.encode(x)
    return module.pooled(h, mask, x.shape[:-1])
  run = jax.jit(lambda p, x: model.apply({"params": p}, x, method=features))
  return np.concatenate([np.asarray(run(params, np.asarray(inputs[i:i + batch_size])))
                         for i in range(0, len(inputs), batch_size)])


def spectrum(x) -> np.ndarray:
  """The feature covariance's eigenvalues, largest first, as fractions of their sum."""
  x = _centred(x)
  values = np.clip(np.linalg.eigvalsh(x.T @ x)[::-1], 0, None)
  return values / max(values.sum(), 1e-300)


def compare(named_features: dict[str, np.ndarray]) -> dict:
  """{'pr': {name: PR}, 'ensd': {'a|b': ENSD} for each pair, 'spectrum': {name: fractions}}."""
  names = list(named_features)
  return {"pr": {n: participation_ratio(named_features[n]) for n in names},
          "ensd": {f"{a}|{b}": ensd(named_features[a], named_features[b])
                   for i, a in enumerate(names) for b in names[i + 1:]},
          "spectrum": {n: spectrum(named_features[n]).tolist() for n in names}}


def figure(result: dict, path: str, title: str) -> None:
  """The normalised eigenvalue spectra, PR in the legend, ENSD in the title."""
  from spt_jax.analysis import plots
  fig, ax = plots.plt.subplots(figsize=(5.6, 3.8))
  for name, values in result["spectrum"].items():
    ax.semilogy(np.arange(1, len(values) + 1), np.maximum(values, 1e-12), marker=".",
                label=f"{name}: PR {result['pr'][name]:.2f}")
  ensds = ", ".join(f"ENSD({k.replace('|', ', ')}) {v:.2f}" for k, v in result["ensd"].items())
  ax.set_title(f"{title}\n{ensds}", fontsize=9)
  ax.set_xlabel("principal direction of the pooled encoder output")
  ax.set_ylabel("fraction of variance")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plots.plt.close(fig)
