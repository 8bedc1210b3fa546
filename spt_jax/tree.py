"""Parameter trees addressed by '/'-joined paths, and regex selection over those paths.

Every user-facing way of naming parameters (freezing, partial loading, surgery) goes through this module,
so a path such as `encoder/layer_0/attention/query/kernel` means the same thing everywhere, and a pattern
that selects nothing is always an error rather than a silent no-op.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import numpy as np


def _key_name(key) -> str:
  for attr in ("key", "name", "idx"):
    if hasattr(key, attr):
      return str(getattr(key, attr))
  return str(key)


def flatten(tree) -> dict[str, Any]:
  """Nested mapping → {'a/b/c': leaf}, in tree order."""
  leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
  return {"/".join(_key_name(k) for k in path): leaf for path, leaf in leaves}


def map_with_path(fn, tree):
  """Like jax.tree.map, but `fn(path, leaf)` also receives the leaf's '/'-joined path."""
  return jax.tree_util.tree_map_with_path(
      lambda path, leaf: fn("/".join(_key_name(k) for k in path), leaf), tree)


def unflatten(flat: Mapping[str, Any]) -> dict:
  """{'a/b/c': leaf} → nested dicts."""
  tree: dict = {}
  for path, leaf in flat.items():
    node = tree
    *parents, last = path.split("/")
    for name in parents:
      node = node.setdefault(name, {})
    node[last] = leaf
  return tree


def _compile(pattern: str, what: str) -> re.Pattern:
  try:
    return re.compile(pattern)
  except re.error as e:
    raise ValueError(f"{what}: {pattern!r} is not a valid regular expression ({e}).") from None


def close_matches(pattern: str, paths: Iterable[str], n: int = 5) -> list[str]:
  paths = list(paths)
  by_text = difflib.get_close_matches(pattern, paths, n=n, cutoff=0.3)
  # Also suggest paths sharing the pattern's literal prefix (e.g. a misspelt last component).
  literal = re.split(r"[.*+?\[\](){}|\\^$]", pattern, maxsplit=1)[0]
  prefix = literal.rsplit("/", 1)[0] if "/" in literal else ""
  by_prefix = [p for p in paths if prefix and p.startswith(prefix)][:n]
  return list(dict.fromkeys(by_text + by_prefix))[:n]


def match_patterns(patterns: Iterable[str], paths: Iterable[str], *, what: str) -> list[str]:
  """Paths fully matched by any pattern; a pattern that matches nothing raises, listing close matches."""
  paths = list(paths)
  selected = set()
  for pattern in patterns:
    regex = _compile(pattern, what)
    hits = [p for p in paths if regex.fullmatch(p)]
    if not hits:
      suggestions = close_matches(pattern, paths)
      hint = ("; close matches: " + ", ".join(suggestions)) if suggestions else ""
      raise ValueError(
          f"{what}: pattern {pattern!r} matches no parameter path (patterns must match the whole "
          f"'/'-joined path){hint}. {len(paths)} paths exist, e.g. {paths[:3]}.")
    selected.update(hits)
  return [p for p in paths if p in selected]


def select(paths: Iterable[str], include: Iterable[str], exclude: Iterable[str] = (), *,
           what: str) -> list[str]:
  """Paths matched by `include` minus those matched by `exclude` (each pattern must match something)."""
  paths = list(paths)
  included = set(match_patterns(include, paths, what=f"{what} include"))
  excluded = set(match_patterns(exclude, paths, what=f"{what} exclude")) if exclude else set()
  return [p for p in paths if p in included and p not in excluded]


def describe(leaf) -> str:
  return f"{tuple(np.shape(leaf))} {np.dtype(leaf.dtype).name}"


def check_compatible(expected, found, *, expected_name: str, found_name: str) -> None:
  """Raises naming every missing/unexpected path and every shape or dtype mismatch."""
  exp, got = flatten(expected), flatten(found)
  problems = []
  missing = [p for p in exp if p not in got]
  unexpected = [p for p in got if p not in exp]
  if missing:
    problems.append(f"paths in {expected_name} but not in {found_name}: {missing[:10]}"
                    + (f" (+{len(missing) - 10} more)" if len(missing) > 10 else ""))
  if unexpected:
    problems.append(f"paths in {found_name} but not in {expected_name}: {unexpected[:10]}"
                    + (f" (+{len(unexpected) - 10} more)" if len(unexpected) > 10 else ""))
  for path in exp.keys() & got.keys():
    e, g = exp[path], got[path]
    if tuple(np.shape(e)) != tuple(np.shape(g)) or np.dtype(e.dtype) != np.dtype(g.dtype):
      problems.append(f"{path}: {expected_name} has {describe(e)}, {found_name} has {describe(g)}")
  if problems:
    raise ValueError(f"{found_name} does not fit {expected_name}:\n  " + "\n  ".join(sorted(problems)))


def merge(target, source, paths: Iterable[str], *, target_name: str, source_name: str):
  """Copies exactly `paths` from `source` into `target` (strict shapes and dtypes); returns a new tree.

  The merged tree keeps `target`'s structure and leaf types; a copied leaf takes `target`'s dtype only
  if the dtypes already agree, so a mismatch is reported instead of silently cast.
  """
  tgt, src = flatten(target), flatten(source)
  problems = []
  for path in paths:
    if path not in tgt:
      problems.append(f"{path}: in {source_name} but not in {target_name}")
    elif path not in src:
      problems.append(f"{path}: in {target_name} but not in {source_name}")
    elif (tuple(np.shape(tgt[path])) != tuple(np.shape(src[path]))
          or np.dtype(tgt[path].dtype) != np.dtype(src[path].dtype)):
      problems.append(f"{path}: {target_name} has {describe(tgt[path])}, "
                      f"{source_name} has {describe(src[path])}")
  if problems:
    raise ValueError(f"Cannot load {source_name} into {target_name}:\n  " + "\n  ".join(problems))
  chosen = set(paths)
  merged = {p: (src[p] if p in chosen else leaf) for p, leaf in tgt.items()}
  leaves = [merged[p] for p in tgt]
  return jax.tree.unflatten(jax.tree.structure(target), leaves)


def count(tree) -> int:
  return int(sum(np.prod(np.shape(x)) for x in jax.tree.leaves(tree)))
