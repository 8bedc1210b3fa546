"""PR and ENSD on matrices whose values are known in closed form, and in the analysis command."""
import numpy as np
import pytest

from spt_jax.analysis import representations


def _directions(n: int, dims, scale=None, seed: int = 0) -> np.ndarray:
  """Features [n, 8] with equal variance along the given coordinate axes, uncorrelated."""
  rng = np.random.default_rng(seed)
  x = np.zeros((n, 8))
  # Orthogonal columns with zero mean and equal norms: exactly equal eigenvalues.
  q, _ = np.linalg.qr(rng.standard_normal((n, n))[:, :len(dims) + 1])
  q = q - q.mean(0)
  q, _ = np.linalg.qr(q[:, 1:] - q[:, 1:].mean(0))
  for i, d in enumerate(dims):
    x[:, d] = q[:, i] * (1.0 if scale is None else scale[i])
  return x


def test_pr_counts_equal_directions_and_ensd_counts_shared_ones():
  a = _directions(200, [0, 1, 2, 3])
  b = _directions(200, [2, 3, 4])
  assert representations.participation_ratio(a) == pytest.approx(4)
  assert representations.participation_ratio(a[:, :1]) == pytest.approx(1)
  assert representations.ensd(a, a) == pytest.approx(4)
  # The same examples seen through 2 of a's 4 directions plus 2 new ones: 2 shared of 4 and 4.
  y = a.copy()
  y[:, [0, 1]] = 0
  y[:, [5, 6]] = _directions(200, [0, 1], seed=1)[:, :2]
  shared = representations.ensd(a, y)
  assert 1.9 < shared < 2.3  # 2, up to the new directions' chance overlap with a's
  # Rescaling a representation or rotating its features changes neither measure.
  rotation, _ = np.linalg.qr(np.random.default_rng(2).standard_normal((8, 8)))
  assert representations.ensd(3 * a @ rotation, a) == pytest.approx(4)
  # Unequal variances: PR = (Σλ)² / Σλ², here (1 + 1 + 4)² / (1 + 1 + 16).
  c = _directions(200, [0, 1, 2], scale=[1.0, 1.0, 2.0])
  assert representations.participation_ratio(c) == pytest.approx(36 / 18)
  assert representations.compare({"x": a, "y": b})["ensd"]["x|y"] >= 0
  with pytest.raises(ValueError, match="the same examples"):
    representations.ensd(a, a[:10])
  # The feature-space variant (the MTL_FT code's): equal on one representation, another number on
  # two that share directions of the examples but not features.
  assert representations.ensd(a, a, space="features") == pytest.approx(4)
  rotated = a @ rotation
  assert representations.ensd(a, rotated) == pytest.approx(4)
  assert representations.ensd(a, rotated, space="features") < 3.9
