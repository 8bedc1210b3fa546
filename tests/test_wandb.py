"""Optional W&B logging, in W&B's offline mode (no network): one W&B run per phase with an id fixed
by the phase directory, the same scalars as metrics.jsonl at the same steps, the test record in the
summary; a resumed phase continues the same W&B run."""
import glob
import json

import pytest

from conftest import load_config, tiny
from spt_jax import experiment, metric_writers

wandb = pytest.importorskip("wandb")


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
  monkeypatch.setenv("WANDB_MODE", "offline")
  monkeypatch.setenv("WANDB_SILENT", "true")
  monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
  metric_writers.enable_wandb("spt-jax-test", mode="offline")
  logged = []
  real_init = wandb.init

  def recording_init(**kwargs):  # the real W&B run, with its logging recorded
    run = real_init(**kwargs)
    real_log = run.log

    def log(values, step=None, **rest):
      logged.append((kwargs["id"], step, dict(values)))
      return real_log(values, step=step, **rest)
    monkeypatch.setattr(run, "log", log)
    logged.append((kwargs["id"], "init", kwargs))
    return run
  monkeypatch.setattr(wandb, "init", recording_init)
  yield logged
  metric_writers.disable_wandb()


def test_wandb_offline_logs_what_metrics_jsonl_holds_and_resumes_the_same_run(offline_wandb,
                                                                              tmp_path, cache_dir):
  config = tiny(load_config("listops_scratch"), cache_dir)
  workdir = tmp_path / "run"
  experiment.run(config, str(workdir))
  phase_dir = workdir / "finetune"
  run_id = metric_writers.wandb_run_id(phase_dir)
  inits = [e for e in offline_wandb if e[1] == "init"]
  assert [e[0] for e in inits] == [run_id] and inits[0][2]["resume"] == "allow"
  logged = {(step, key): value for rid, step, values in offline_wandb if step != "init"
            for key, value in values.items()}
  records = [json.loads(line) for line in open(phase_dir / "metrics.jsonl")]
  expected = {(r["step"], f"{r['split']}/{k}"): v for r in records if r["split"] != "test"
              for k, v in r.items() if k not in ("step", "split")}
  assert logged == expected
  # W&B's offline run files sit next to the phase, under the phase's own run id.
  assert glob.glob(str(phase_dir / "wandb" / f"offline-run-*-{run_id}" / f"run-{run_id}.wandb"))
  # A second attempt at the same phase directory (a resumed run) is the same W&B run.
  assert metric_writers.wandb_run_id(str(phase_dir) + "/") == run_id


def test_wandb_options_are_checked_before_a_run():
  with pytest.raises(ValueError, match="must be 'online' or 'offline'"):
    metric_writers.enable_wandb("p", mode="sometimes")
  metric_writers.disable_wandb()
