"""The tour notebook (notebooks/tour.py, jupytext percent format) runs top to bottom."""
import os
import runpy

from conftest import ROOT


def test_tour_notebook_runs_and_its_checks_hold(tmp_path, monkeypatch):
  monkeypatch.setenv("SPT_TOUR_WORKDIR", str(tmp_path))
  monkeypatch.setenv("SPT_TOUR_VARIANT", "smoke")
  monkeypatch.chdir(ROOT)
  namespace = runpy.run_path(os.path.join(ROOT, "notebooks", "tour.py"), run_name="__main__")
  # The notebook asserts its own claims (load_run's evaluation equals results.json; the zeroed
  # classifier's accuracy is its majority class's share); here, that its cells produced them.
  assert namespace["test"] == namespace["results"]["finetune"]["test_of_best"]
  assert 0.0 <= namespace["untrained_qk"]["accuracy"] <= 1.0
  assert os.path.getsize(tmp_path / "tour_attention.png") > 0
