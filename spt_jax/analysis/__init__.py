"""Analysis of finished runs; shared here: reading a phase directory's config."""
from __future__ import annotations

import json
import os

import ml_collections


def read_phase_config(run: str) -> tuple[ml_collections.ConfigDict, str]:
  """(the run's config, the phase name) of a phase directory `run`, e.g. runs/x/finetune."""
  config_path = os.path.join(run, "config.json")
  if not os.path.exists(config_path):
    raise FileNotFoundError(f"{config_path} not found: --run must be a phase directory of a run.")
  with open(config_path) as f:
    return ml_collections.ConfigDict(json.load(f)), os.path.basename(os.path.normpath(run))
