"""scripts/attention_table.py: per-seed attention metrics and their mean ± std, as the study uses."""
import json
import os

import pytest
from conftest import load_script


def _script():
  return load_script("attention_table")


def _write(root, name, layers):
  os.makedirs(root / name)
  (root / name / "metrics.json").write_text(json.dumps(
      {"layers": [{"layer": i, "overall": dict(diagonality=d, mean_distance=m, band_mass=0.0)}
                  for i, (d, m) in enumerate(layers)]}))


def test_table_lists_each_seed_and_the_mean_and_std(tmp_path):
  _write(tmp_path, "spt_seed_0_pretrain", [(0.1, 70.0), (0.4, 50.0)])
  _write(tmp_path, "spt_seed_2_pretrain", [(0.3, 60.0), (0.2, 60.0)])
  _write(tmp_path, "scratch_seed_0_init", [(-0.02, 88.0), (-0.04, 87.0)])
  os.makedirs(tmp_path / "not_an_entry")
  text = _script().table(_script().collect(str(tmp_path)))
  assert "| checkpoint | layer | seed 0 | seed 2 | mean ± std |" in text
  assert "| SPT, after pretraining | 0 | 0.10 | 0.30 | 0.20 ± 0.10 (2) |" in text
  assert "| SPT, after pretraining | 1 | 50.0 | 60.0 | 55.0 ± 5.0 (2) |" in text
  assert "| scratch, at initialisation | 1 | -0.04 | — | -0.04 ± 0.00 (1) |" in text
  # SPT's rows come before scratch's, whatever the directory order.
  assert text.index("SPT, after pretraining") < text.index("scratch, at initialisation")
  with pytest.raises(ValueError, match="no <arm>_seed_<s>_<checkpoint>/metrics.json"):
    _script().table(_script().collect(str(tmp_path / "not_an_entry")))
