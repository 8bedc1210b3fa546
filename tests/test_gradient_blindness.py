import jax
import numpy as np

from spt_jax.analysis import gradient_blindness as gb


def test_proximity_direction_has_equal_column_sums():
  delta = gb.proximity_direction(10, 2)
  np.testing.assert_allclose(delta.sum(0), 0, atol=1e-12)
  assert np.abs(delta).sum() > 0


def test_supervised_gradient_is_blind_to_proximity_and_masked_is_not():
  for seed in range(5):
    g_sup, g_mlm = gb.score_gradients(jax.random.PRNGKey(seed))
    r = gb.report(g_sup, g_mlm)
    # (a) ∇_S L = 1 uᵀ with u ⟂ 1, hence orthogonal to every equal-column-sum direction.
    assert r["supervised_row_spread"] < 1e-5
    assert r["supervised_row_sum"] < 1e-5
    assert abs(r["supervised_cosine_with_proximity"]) < 1e-5
    # (b) the per-token loss differs across queries and has a real component along proximity.
    assert r["masked_row_spread"] > 0.1
    assert abs(r["masked_cosine_with_proximity"]) > 1e-3
    assert np.abs(g_sup).max() > 1e-4  # the supervised gradient itself is not zero
