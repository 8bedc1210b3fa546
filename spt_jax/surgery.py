r"""Checkpoint surgery: read, edit and write parameter trees without building a model.

Every edit takes full-match regexes over '/'-joined paths, or the presets of `freeze` and
`init_from` (`qk`, `attention`, `mlp`, ...: param_groups.PRESETS), and a pattern that matches
nothing is an error. Edits return a new tree and leave their input unchanged.
A saved tree is loaded into a run with `config.<phase>.init_from.source=<saved path>`.

  python -m spt_jax.surgery ls runs/x/pretrain [--checkpoint best|latest|init|STEP] [--pattern RE]
  python -m spt_jax.surgery diff runs/x/pretrain runs/x/finetune [--checkpoint best]
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import zlib
from collections.abc import Iterable, Sequence

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging

from spt_jax import checkpoints, param_groups, tree
from spt_jax.metric_writers import workdir_path

DIFF_STATUSES = ("changed", "same", "only_in_a", "only_in_b", "shape_mismatch")


# ---------------------------------------------------------------- Reading and writing


def load(path: str, checkpoint: str = checkpoints.BEST) -> dict:
  """Parameters of a phase, checkpoints, step or params item directory, as writable numpy arrays."""
  params_dir = checkpoints.resolve_params_dir(os.fspath(workdir_path(path)), str(checkpoint))
  try:
    restored = checkpoints.restore_item(params_dir)
  except (FileNotFoundError, ValueError):
    raise
  except Exception as e:  # Orbax's errors for a damaged item rarely name the directory.
    raise ValueError(f"{params_dir} could not be restored as an Orbax checkpoint item: "
                     f"{type(e).__name__}: {e}") from e
  # Copies, not views of device buffers, so callers may edit leaves in place.
  return jax.tree.map(np.array, restored)


def save(params, path: str) -> str:
  """Writes `params` as a StandardCheckpointer item at `<path>/params`; returns that directory.

  `path` must not exist or be an empty directory; Orbax writes under a temporary name and renames,
  so an interrupted save leaves no item that `init_from` would accept.
  """
  where = workdir_path(path)  # a local path made absolute, a URL (gs://) as it is
  path = os.fspath(where)
  if where.exists() and (not where.is_dir() or any(where.iterdir())):
    raise FileExistsError(f"Refusing to save parameters to {path}: it exists and is not an empty "
                          f"directory (choose a new path).")
  if not jax.tree.leaves(params):
    raise ValueError("Refusing to save an empty parameter tree.")
  item_dir = os.fspath(where / "params")
  with ocp.StandardCheckpointer() as ckptr:
    ckptr.save(item_dir, params)
    ckptr.wait_until_finished()
  resolved = checkpoints.resolve_params_dir(path)
  if os.fspath(workdir_path(resolved)) != item_dir:
    raise RuntimeError(f"Saved {item_dir}, but {path} resolves to {resolved}.")
  return item_dir


# ---------------------------------------------------------------- Inspecting


def _norm(x) -> float:
  return float(np.linalg.norm(np.asarray(x, np.float64).ravel()))


def ls(params) -> list[dict]:
  """One row per leaf: path, shape, dtype, size and L2 norm."""
  return [{"path": p, "shape": tuple(np.shape(x)), "dtype": np.dtype(x.dtype).name,
           "size": int(np.size(x)), "norm": _norm(x)} for p, x in tree.flatten(params).items()]


def _table(header: Sequence[str], body: Iterable[Sequence[str]], right: set[int]) -> list[str]:
  body = [list(r) for r in body]
  widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(header)]
  fmt = lambda r: "  ".join(c.rjust(w) if i in right else c.ljust(w)
                            for i, (c, w) in enumerate(zip(r, widths))).rstrip()
  return [fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in body]


def format_table(rows: Sequence[dict]) -> str:
  """`ls` rows as an aligned text table, with the total parameter count."""
  body = [(r["path"], str(r["shape"]), r["dtype"], f"{r['size']:,}", f"{r['norm']:.4g}")
          for r in rows]
  lines = _table(("path", "shape", "dtype", "size", "norm"), body, right={3, 4})
  total = sum(r["size"] for r in rows)
  lines.append(f"total: {total:,} parameters in {len(rows)} arrays")
  return "\n".join(lines)


def diff(a, b) -> list[dict]:
  """Per-path comparison of two trees: a's paths in order, then the paths only in b.

  `rel_change` is ‖b−a‖/‖a‖ (inf when ‖a‖=0 and b≠a); it and `max_abs` are None where the leaves
  cannot be compared. A leaf whose dtype differs is `changed` even if its values are equal.
  """
  fa, fb = tree.flatten(a), tree.flatten(b)
  rows = []
  for path, x in fa.items():
    if path not in fb:
      rows.append({"path": path, "status": "only_in_a", "rel_change": None, "max_abs": None})
      continue
    y = fb[path]
    if tuple(np.shape(x)) != tuple(np.shape(y)):
      rows.append({"path": path, "status": "shape_mismatch", "rel_change": None, "max_abs": None})
      continue
    x64, y64 = np.asarray(x, np.float64), np.asarray(y, np.float64)
    delta = y64 - x64
    same = np.dtype(x.dtype) == np.dtype(y.dtype) and np.array_equal(x64, y64)
    change, base = _norm(delta), _norm(x64)
    rel = 0.0 if change == 0 else (change / base if base > 0 else math.inf)
    rows.append({"path": path, "status": "same" if same else "changed", "rel_change": rel,
                 "max_abs": float(np.max(np.abs(delta))) if delta.size else 0.0})
  rows += [{"path": p, "status": "only_in_b", "rel_change": None, "max_abs": None}
           for p in fb if p not in fa]
  return rows


def format_diff(rows: Sequence[dict], name_a: str = "A", name_b: str = "B") -> str:
  """`diff` rows as an aligned text table, with a summary line."""
  num = lambda v: "-" if v is None else f"{v:.4g}"
  body = [(r["path"], r["status"], num(r["rel_change"]), num(r["max_abs"])) for r in rows]
  lines = _table(("path", "status", "rel_change", "max_abs"), body, right={2, 3})
  counts = {s: sum(r["status"] == s for r in rows) for s in DIFF_STATUSES}
  summary = (f"{len(rows)} paths: {counts['changed']} changed, {counts['same']} same, "
             f"{counts['only_in_a']} only in {name_a}, {counts['only_in_b']} only in {name_b}, "
             f"{counts['shape_mismatch']} shape mismatch")
  changed = [r for r in rows if r["status"] == "changed"]
  if changed:
    top = max(changed, key=lambda r: r["rel_change"])
    summary += f"; largest relative change {top['rel_change']:.4g} at {top['path']}"
  lines.append(summary)
  return "\n".join(lines)


# ---------------------------------------------------------------- Editing


def select(params, include: Sequence[str], exclude: Sequence[str] = ()) -> dict:
  """Only the leaves matched by `include` and not by `exclude`, as a nested dict."""
  flat = tree.flatten(params)
  chosen = tree.select(flat, param_groups.expand(include), param_groups.expand(exclude),
                       what="surgery.select")
  return tree.unflatten({p: flat[p] for p in chosen})


def drop(params, patterns: Sequence[str]) -> dict:
  """Every leaf except those matched by `patterns`, as a nested dict."""
  flat = tree.flatten(params)
  dropped = set(tree.match_patterns(param_groups.expand(patterns), flat, what="surgery.drop"))
  return tree.unflatten({p: x for p, x in flat.items() if p not in dropped})


def transplant(target, source, include: Sequence[str], exclude: Sequence[str] = ()) -> dict:
  """`target` with exactly the selected paths of `source` copied in (shapes and dtypes must agree)."""
  chosen = tree.select(tree.flatten(source), param_groups.expand(include),
                       param_groups.expand(exclude), what="surgery.transplant")
  return tree.merge(target, source, chosen, target_name="target", source_name="source")


def _edit(params, patterns: Sequence[str], fn, what: str):
  chosen = set(tree.match_patterns(param_groups.expand(patterns), tree.flatten(params), what=what))
  return tree.map_with_path(lambda p, x: fn(p, np.asarray(x)) if p in chosen else x, params)


def reinit(params, patterns: Sequence[str], *, std: float, seed: int = 0) -> dict:
  """Matched leaves redrawn from N(0, std²) (std=0: zeros), keeping shape and dtype.

  Each leaf's draw depends only on (seed, path), so adding or removing other patterns does not
  change it.
  """
  if not std >= 0:
    raise ValueError(f"reinit: std={std} must be >= 0.")

  def draw(path: str, x: np.ndarray) -> np.ndarray:
    if std == 0:
      return np.zeros(x.shape, x.dtype)
    rng = np.random.default_rng([seed, zlib.crc32(path.encode())])
    return (std * rng.standard_normal(x.shape)).astype(x.dtype)
  return _edit(params, patterns, draw, what="surgery.reinit")


def rescale(params, patterns: Sequence[str], factor: float) -> dict:
  """Matched leaves multiplied by `factor`, keeping their dtype."""
  return _edit(params, patterns, lambda _, x: (x * factor).astype(x.dtype), what="surgery.rescale")


# ---------------------------------------------------------------- Command line (read-only)


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="python -m spt_jax.surgery",
      description="Inspect Orbax parameter checkpoints (a phase, checkpoints, step or params dir).")
  sub = parser.add_subparsers(dest="command", required=True)
  ckpt_help = "best, latest, init or a step number (for phase / checkpoints directories)"
  p_ls = sub.add_parser("ls", help="list parameter paths, shapes, dtypes, sizes and norms")
  p_ls.add_argument("ckpt")
  p_ls.add_argument("--checkpoint", default=checkpoints.BEST, help=ckpt_help)
  p_ls.add_argument("--pattern", action="append", default=None,
                    help="full-match regex over paths; repeatable; each must match something")
  p_diff = sub.add_parser("diff", help="per-path relative change from CKPT_A to CKPT_B")
  p_diff.add_argument("ckpt_a")
  p_diff.add_argument("ckpt_b")
  p_diff.add_argument("--checkpoint", default=checkpoints.BEST, help=ckpt_help)
  return parser


def main(argv: Sequence[str] | None = None) -> int:
  args = _parser().parse_args(argv)
  # Orbax's warnings about metadata it could not find would bury the table or the one-line error.
  logging.set_verbosity(logging.ERROR)
  try:
    if args.command == "ls":
      params = load(args.ckpt, args.checkpoint)
      if args.pattern:
        params = select(params, args.pattern)
      print(format_table(ls(params)))
    else:
      a, b = load(args.ckpt_a, args.checkpoint), load(args.ckpt_b, args.checkpoint)
      print(format_diff(diff(a, b), name_a=args.ckpt_a, name_b=args.ckpt_b))
  except (FileNotFoundError, ValueError) as e:
    message = " ".join(str(e).split())  # One line, whatever the underlying message's layout.
    print(f"surgery {args.command}: error: {message}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
