"""How a phase's initial parameters are formed: fresh, partly loaded from a checkpoint, then rescaled.

One mechanism serves the SPT hand-off (everything but `mlm_head`), hybrid initialisation (e.g. only
W_Q, W_K) and loading an edited checkpoint: exactly the checkpoint paths selected by `include` minus
`exclude` (presets or regexes) are copied, shapes and dtypes must agree, and every selected path must
exist in the model (as in big_vision's `merge_params`, a silent partial load is never an option).
Then the init-scale controls of the pretraining → fine-tuning theory apply: `gamma_ft` re-draws the
readout with std gamma_ft (0 allowed), `rescale` multiplies chosen subtrees (absolute scale), and
`relative_scale` λ moves scale between earlier and later layers at a fixed sum of squares, as the
theory's λ does between a diagonal network's two layers (earlier × √(1+λ), later × √(1-λ)).
"""
from __future__ import annotations

import math
import os
import zlib

import jax

from spt_jax import checkpoints, metric_writers, param_groups, tree


def resolve_source(source: str, workdir: str, phase_names, *, key: str) -> str:
  """A phase name of this run means `<workdir>/<phase>`; anything else is a path."""
  if source in phase_names:
    return os.path.join(workdir, source)
  path = metric_writers.workdir_path(source)  # a local path or a URL (another run on gs://)
  if not path.exists():
    raise FileNotFoundError(f"{key}={source!r} is neither a phase of this run (phases: "
                            f"{','.join(phase_names)}) nor an existing checkpoint path.")
  return os.fspath(path)


def _merge(params, loaded, init_cfg, params_dir: str):
  """(the checkpoint paths `include` minus `exclude` selects, `params` with them copied in)."""
  chosen = tree.select(tree.flatten(loaded), param_groups.expand(init_cfg.include),
                       param_groups.expand(init_cfg.exclude), what=f"init_from {params_dir}")
  return chosen, tree.merge(params, loaded, chosen, target_name="the model",
                            source_name=f"checkpoint {params_dir}")


def load_into(params, init_cfg, *, workdir: str, phase_names, phase: str, sharding=None):
  """Returns (params with the selected leaves replaced, report dict of loaded and fresh paths)."""
  source = resolve_source(init_cfg.source, workdir, phase_names,
                          key=f"config.{phase}.init_from.source")
  params_dir = checkpoints.resolve_params_dir(source, str(init_cfg.checkpoint))
  loaded = checkpoints.restore_item(params_dir, sharding=sharding)
  chosen, merged = _merge(params, loaded, init_cfg, params_dir)
  loaded_set = set(chosen)
  report = {"source": os.fspath(metric_writers.workdir_path(params_dir)), "loaded": chosen,
            "fresh": [p for p in tree.flatten(params) if p not in loaded_set],
            "ignored": [p for p in tree.flatten(loaded) if p not in loaded_set]}
  return merged, report


def check(init_cfg, params, *, workdir: str, phase_names, phase: str, planned: dict) -> None:
  """Everything `load_into` and `apply_scales` will check, on shapes alone and before any training:
  the source exists (a phase of this run, planned with shapes `planned[source]`, or a checkpoint
  whose metadata is read), every pattern matches, every selected leaf fits `params`."""
  if not init_cfg.source:
    _scale_paths(init_cfg, params, phase)
    return
  checkpoints.check_checkpoint_name(init_cfg.checkpoint)
  if init_cfg.source in planned:
    loaded, where = planned[init_cfg.source], f"phase {init_cfg.source!r}"
  else:
    source = resolve_source(init_cfg.source, workdir, phase_names,
                            key=f"config.{phase}.init_from.source")
    where = checkpoints.resolve_params_dir(source, str(init_cfg.checkpoint))
    loaded = checkpoints.item_abstract(where)
  _merge(params, loaded, init_cfg, where)
  _scale_paths(init_cfg, params, phase)


def _scale_paths(init_cfg, params, phase: str):
  """(the leaves `gamma_ft` re-draws, those `rescale` multiplies, the factor each multiplied leaf
  gets: `rescale` times the relative scale's √(1±λ)); every pattern must match, and the relative
  scale's two groups must not share a leaf."""
  gamma, rescaled, factors = [], [], {}
  key = f"config.{phase}.init_from"
  if init_cfg.gamma_ft >= 0:
    gamma = param_groups.resolve(init_cfg.gamma_ft_paths, params, what=f"{key}.gamma_ft_paths")
  if init_cfg.rescale != 1.0:
    if not init_cfg.rescale_paths:
      raise ValueError(f"{key}.rescale={init_cfg.rescale} needs {key}.rescale_paths (presets or "
                       f"regexes).")
    rescaled = param_groups.resolve(init_cfg.rescale_paths, params, what=f"{key}.rescale_paths")
    factors = {p: init_cfg.rescale for p in rescaled}
  lam = init_cfg.relative_scale
  if lam != 0.0:
    earlier = param_groups.resolve(init_cfg.relative_scale_earlier, params,
                                   what=f"{key}.relative_scale_earlier")
    later = param_groups.resolve(init_cfg.relative_scale_later, params,
                                 what=f"{key}.relative_scale_later")
    both = sorted(set(earlier) & set(later))
    if both:
      raise ValueError(f"{key}.relative_scale_earlier and relative_scale_later both select "
                       f"{both[0]!r}: a leaf is either earlier or later.")
    for paths, factor in ((earlier, math.sqrt(1 + lam)), (later, math.sqrt(1 - lam))):
      for p in paths:
        factors[p] = factors.get(p, 1.0) * factor
  return gamma, rescaled, factors


def apply_scales(params, init_cfg, rng, *, phase: str):
  """The readout re-initialisation (`gamma_ft`) and subtree multipliers (`rescale`,
  `relative_scale`); a report dict."""
  report = {}
  gamma_paths, rescaled, factors = _scale_paths(init_cfg, params, phase)
  if init_cfg.gamma_ft >= 0:
    def redraw(path, leaf):
      if path not in gamma_paths:
        return leaf
      # Keyed by path: the draw of one leaf does not depend on which others are re-drawn.
      key = jax.random.fold_in(rng, zlib.crc32(path.encode()) & 0x7FFFFFFF)
      return jax.device_put(init_cfg.gamma_ft * jax.random.normal(key, leaf.shape, leaf.dtype),
                            leaf.sharding)
    params = tree.map_with_path(redraw, params)
    report["gamma_ft"] = {"std": init_cfg.gamma_ft, "paths": gamma_paths}
  if factors:
    params = tree.map_with_path(
        lambda p, x: (x * factors[p]).astype(x.dtype) if p in factors else x, params)
    if rescaled:
      report["rescale"] = {"factor": init_cfg.rescale, "paths": rescaled}
    if init_cfg.relative_scale != 0.0:
      report["relative_scale"] = {"lambda": init_cfg.relative_scale, "factors": factors}
  return params, report
