"""Position encodings: what each one adds to the model, and the analysis figures that show it."""
from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from spt_jax.analysis import attention as analysis
from spt_jax.models import transformer


def _model_and_tokens(position: str, pooling: str = "mean", **fields):
  fields = dict(dict(vocab_size=12, max_length=10, num_layers=2, d_model=16, num_heads=2, d_ff=32,
                     position=position, pooling=pooling), **fields)
  model = transformer.build(**fields)
  tokens = np.random.default_rng(0).integers(3, 12, (3, 10))
  tokens[1, 6:] = 0
  params = jax.jit(model.init)(jax.random.PRNGKey(0), tokens)["params"]
  return model, params, tokens


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_interaction_figure_uses_the_learned_table_at_the_data_positions(pooling, tmp_path):
  model, params, tokens = _model_and_tokens("learned", pooling)
  layers = analysis.position_figures(model, params, tokens, tokens != 0, str(tmp_path), "t")
  assert [entry["figure"] for entry in layers] == ["position_layer0.png", "position_layer1.png"]
  assert all((tmp_path / entry["figure"]).stat().st_size > 0 for entry in layers)
  # The data's first position is the table's row 1 when the model's CLS token takes row 0.
  table = np.asarray(params["encoder"]["position_embedding"])
  codes = table[int(pooling == "cls"):][:10]
  expected = analysis.position_interaction(params, 1, codes)
  np.testing.assert_allclose(
      layers[1]["heads"][0]["mean_interaction"][9], np.diagonal(expected[0]).mean(), rtol=1e-5)
  json.dumps(layers, allow_nan=False)  # metrics.json stays strict JSON


def test_no_position_figures_without_positions(tmp_path):
  model, params, tokens = _model_and_tokens("none")
  assert analysis.position_figures(model, params, tokens, tokens != 0, str(tmp_path), "t") == []
