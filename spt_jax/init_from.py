"""Initialise some parameters from a checkpoint and keep the fresh values of all others.

This is the one mechanism behind the SPT hand-off (everything but `mlm_head`), hybrid initialisation
(e.g. only W_Q, W_K) and loading an edited checkpoint: exactly the checkpoint paths selected by
`include` minus `exclude` are copied, shapes and dtypes must agree, and every selected path must exist
in the model (as in big_vision's `merge_params`, a silent partial load is never an option).
"""
from __future__ import annotations

import os

from spt_jax import checkpoints, tree


def resolve_source(source: str, workdir: str, phase_names) -> str:
  """A phase name of this run means `<workdir>/<phase>`; anything else is a path."""
  if source in phase_names:
    return os.path.join(workdir, source)
  return os.path.expanduser(source)


def load_into(params, init_cfg, *, workdir: str, phase_names, sharding=None):
  """Returns (params with the selected leaves replaced, report dict of loaded and fresh paths)."""
  params_dir = checkpoints.resolve_params_dir(
      resolve_source(init_cfg.source, workdir, phase_names), str(init_cfg.checkpoint))
  loaded = checkpoints.restore_item(params_dir, sharding=sharding)
  chosen = tree.select(tree.flatten(loaded), init_cfg.include, init_cfg.exclude,
                       what=f"init_from {params_dir}")
  merged = tree.merge(params, loaded, chosen, target_name="the model",
                      source_name=f"checkpoint {params_dir}")
  loaded_set = set(chosen)
  report = {"source": os.path.abspath(params_dir), "loaded": chosen,
            "fresh": [p for p in tree.flatten(params) if p not in loaded_set],
            "ignored": [p for p in tree.flatten(loaded) if p not in loaded_set]}
  return merged, report
