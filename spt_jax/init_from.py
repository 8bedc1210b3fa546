"""How a phase's initial parameters are formed: fresh, partly loaded from a checkpoint, then rescaled.

One mechanism serves the SPT hand-off (everything but `mlm_head`), hybrid initialisation (e.g. only
W_Q, W_K) and loading an edited checkpoint: exactly the checkpoint paths selected by `include` minus
`exclude` (presets or regexes) are copied, shapes and dtypes must agree, and every selected path must
exist in the model (as in big_vision's `merge_params`, a silent partial load is never an option).
Then the init-scale controls of the pretraining → fine-tuning theory apply: `gamma_ft` re-draws the
readout with std gamma_ft (0 allowed) and `rescale` multiplies chosen subtrees (relative layer scale).
"""
from __future__ import annotations

import os
import zlib

import jax

from spt_jax import checkpoints, param_groups, tree


def resolve_source(source: str, workdir: str, phase_names, *, key: str) -> str:
  """A phase name of this run means `<workdir>/<phase>`; anything else is a path."""
  if source in phase_names:
    return os.path.join(workdir, source)
  path = os.path.expanduser(source)
  if not os.path.exists(path):
    raise FileNotFoundError(f"{key}={source!r} is neither a phase of this run (phases: "
                            f"{','.join(phase_names)}) nor an existing checkpoint path.")
  return path


def load_into(params, init_cfg, *, workdir: str, phase_names, phase: str, sharding=None):
  """Returns (params with the selected leaves replaced, report dict of loaded and fresh paths)."""
  source = resolve_source(init_cfg.source, workdir, phase_names,
                          key=f"config.{phase}.init_from.source")
  params_dir = checkpoints.resolve_params_dir(source, str(init_cfg.checkpoint))
  loaded = checkpoints.restore_item(params_dir, sharding=sharding)
  chosen = tree.select(tree.flatten(loaded), param_groups.expand(init_cfg.include),
                       param_groups.expand(init_cfg.exclude), what=f"init_from {params_dir}")
  merged = tree.merge(params, loaded, chosen, target_name="the model",
                      source_name=f"checkpoint {params_dir}")
  loaded_set = set(chosen)
  report = {"source": os.path.abspath(params_dir), "loaded": chosen,
            "fresh": [p for p in tree.flatten(params) if p not in loaded_set],
            "ignored": [p for p in tree.flatten(loaded) if p not in loaded_set]}
  return merged, report


def apply_scales(params, init_cfg, rng, *, phase: str):
  """The readout re-initialisation (`gamma_ft`) and subtree multipliers (`rescale`); a report dict."""
  report = {}
  if init_cfg.gamma_ft >= 0:
    paths = param_groups.resolve(init_cfg.gamma_ft_paths, params,
                                 what=f"config.{phase}.init_from.gamma_ft_paths")

    def redraw(path, leaf):
      if path not in paths:
        return leaf
      # Keyed by path: the draw of one leaf does not depend on which others are re-drawn.
      key = jax.random.fold_in(rng, zlib.crc32(path.encode()) & 0x7FFFFFFF)
      return jax.device_put(init_cfg.gamma_ft * jax.random.normal(key, leaf.shape, leaf.dtype),
                            leaf.sharding)
    params = tree.map_with_path(redraw, params)
    report["gamma_ft"] = {"std": init_cfg.gamma_ft, "paths": paths}
  if init_cfg.rescale != 1.0:
    if not init_cfg.rescale_paths:
      raise ValueError(f"config.{phase}.init_from.rescale={init_cfg.rescale} needs "
                       f"config.{phase}.init_from.rescale_paths (presets or regexes).")
    paths = param_groups.resolve(init_cfg.rescale_paths, params,
                                 what=f"config.{phase}.init_from.rescale_paths")
    params = tree.map_with_path(
        lambda p, x: (x * init_cfg.rescale).astype(x.dtype) if p in paths else x, params)
    report["rescale"] = {"factor": init_cfg.rescale, "paths": paths}
  return params, report
