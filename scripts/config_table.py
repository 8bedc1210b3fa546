r"""Writes docs/configs.md: every hyperparameter of every full-scale LRA config, with its source.

  python scripts/config_table.py            # rewrites docs/configs.md
  python scripts/config_table.py --check    # exit 1 if docs/configs.md differs from the configs

The values are read from the configs themselves (`configs/<task>_spt.py` for both phases, the
from-scratch config checked equal to its fine-tuning phase), and each source from Amos et al.'s
published settings in tests/lra_published.py; tests/test_config_table.py fails when the two drift
apart or the file is stale.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# The published settings live with the tests that hold the configs to them.
sys.path.append(os.path.join(ROOT, "tests"))

import lra_published  # noqa: E402
from spt_jax import config_lib, sweep  # noqa: E402

OUT = os.path.join(ROOT, "docs", "configs.md")
PHASES = ("pretrain", "finetune")
# Bookkeeping with no bearing on what is learned, left out of the table.
_SKIPPED = ("log_every_steps", "checkpoint_every_steps", "data_dir", "cache_dir", "generate",
            "attention_metrics_every_steps", "eval_batch_size", "max_eval_batches", "data")
_SPT_JAX = "spt-jax"


def _flat(d):
  return ((k, tuple(v) if isinstance(v, list) else v) for k, v in config_lib.flat_items(d))


def _fmt(value) -> str:
  if isinstance(value, tuple):
    return "(" + ", ".join(f"`{v}`" for v in value) + ")" if value else "()"
  if isinstance(value, str):
    return f"`{value}`" if value else "''"
  return f"{value:g}" if isinstance(value, float) else str(value)


def _cell(entry) -> str:
  if entry is None:
    return _SPT_JAX
  return entry.source + (f" — {entry.note}" if entry.note else "")


_PIXEL_TASKS = ("image", "pathfinder", "pathx")
NOT_USED = "—"


def _used(task: str, config, key: str, phase: str | None = None) -> bool:
  """Whether a setting has any effect in this config (the table shows NOT_USED otherwise)."""
  leaf = key.split(".")[-1]
  if phase is not None:
    p = config[phase]
    if (leaf == "pixel_loss") != (task in _PIXEL_TASKS) and leaf in ("pixel_loss", "bert_mix"):
      return False
    if key.startswith("init_from.") and (phase == "pretrain" or not p.init_from.source):
      return key == "init_from.source"
    if leaf == "end_lr_ratio" and p.schedule == "constant":
      return False
    return True
  if key == "model.classifier_activation":
    return config.model.classifier == "mlp"
  if key == "model.pair_features":
    return task == "retrieval"
  return True


def configs(task: str):
  spt = sweep.load_config(f"configs/{task}_spt.py")
  scratch = sweep.load_config(f"configs/{task}_scratch.py")
  return spt, scratch


def check_scratch_matches(task: str, spt, scratch) -> list[str]:
  """The from-scratch config must be the SPT config's fine-tuning from a random initialisation."""
  problems = []
  for section in ("model", "data"):
    if spt[section].to_dict() != scratch[section].to_dict():
      problems.append(f"configs/{task}_scratch.py: config.{section} differs from {task}_spt.py's")
  a = dict(_flat(spt.finetune.to_dict()))
  b = dict(_flat(scratch.finetune.to_dict()))
  for key in sorted(a.keys() | b.keys()):
    if key != "init_from.source" and a.get(key) != b.get(key):
      problems.append(f"configs/{task}_scratch.py: finetune.{key}={b.get(key)!r}, "
                      f"{task}_spt.py's is {a.get(key)!r}")
  return problems


def check_table_matches(task: str, spt) -> list[str]:
  """Every value in tests/lra_published.py must be the config's."""
  flat = dict(_flat(spt.to_dict()))
  return [f"configs/{task}_spt.py: config.{key}={flat.get(key)!r}, the table says {value!r}"
          for key, value in lra_published.values(task).items() if flat.get(key) != value]


def task_section(task: str) -> list[str]:
  spt, _ = configs(task)
  lines = [f"## {task}", "",
           f"`configs/{task}_spt.py` (both phases) and `configs/{task}_scratch.py` (its "
           f"fine-tuning phase from a random initialisation).", "",
           "| setting | value | source |", "|---|---|---|"]
  for section in ("data", "model"):
    for key, value in _flat(spt[section].to_dict()):
      if key.split(".")[-1] in _SKIPPED or key == "task":
        continue
      full = f"{section}.{key}"
      if _used(task, spt, full):
        lines.append(f"| {full} | {_fmt(value)} | {_cell(lra_published.source(task, full))} |")
      else:
        lines.append(f"| {full} | {NOT_USED} | |")
  lines += ["", "| phase setting | SPT pretraining | fine-tuning | source |", "|---|---|---|---|"]
  pretrain, finetune = dict(_flat(spt.pretrain.to_dict())), dict(_flat(spt.finetune.to_dict()))
  # A phase has the shared fields plus its objective's own: rows for the union, in pretraining order.
  for key in list(pretrain) + [k for k in finetune if k not in pretrain]:
    if key.split(".")[-1] in _SKIPPED or key.split(".")[0] in _SKIPPED:
      continue
    flat = (pretrain, finetune)
    used = [key in f and _used(task, spt, key, p) for f, p in zip(flat, PHASES)]
    values = [_fmt(f[key]) if u else NOT_USED for f, u in zip(flat, used)]
    cells = [_cell(lra_published.source(task, f"{p}.{key}")) if u else ""
             for p, u in zip(PHASES, used)]
    if not any(used):
      continue
    source = (cells[0] or cells[1]) if cells[0] == cells[1] or not all(cells) else (
        f"pretrain: {cells[0]}; finetune: {cells[1]}")
    lines.append(f"| {key} | {values[0]} | {values[1]} | {source} |")
  return lines + [""]


def render() -> str:
  problems = []
  for task in lra_published.TASKS:
    spt, scratch = configs(task)
    problems += check_scratch_matches(task, spt, scratch) + check_table_matches(task, spt)
  if problems:
    raise ValueError("The LRA configs disagree with tests/lra_published.py:\n  " +
                     "\n  ".join(problems))
  lines = ["# LRA configs: every hyperparameter and its source", "",
           "Generated by `python scripts/config_table.py` from the configs (do not edit by hand; "
           "`tests/test_config_table.py` fails when a config and this file differ). Each "
           "`configs/<task>_spt.py` states these values with their sources beside them; the "
           "published values are `tests/lra_published.py`'s, and a config that drifts from them "
           "fails `tests/test_config_table.py`.", "",
           f"Sources: **{lra_published.PAPER}** = Amos et al., \"Never Train from Scratch\" "
           "(ICLR 2024), "
           "appendix C, the source for masking rates and learning rates (their yaml files ship "
           "`mlm_prob: 0.0` and `lr: 0.05` for several tasks and set them on the command line); "
           f"a `file:line` is in their code, `{lra_published.CODE}`; **{_SPT_JAX}** = a setting of "
           "this codebase with no counterpart there (bookkeeping such as logging and checkpoint "
           "intervals is left out). Pre-LayerNorm blocks with a final LayerNorm are not a "
           "setting: every spt-jax model has them, as theirs (`src/models/sequence/block.py:93-99`"
           ", `model.py:75-79`).", "",
           "Where paper and code disagree the paper is followed and the code's value is noted "
           "after a dash.", "", "## Deliberate differences from their code", ""]
  lines += [f"- {d}" for d in lra_published.DELIBERATE] + [""]
  for task in lra_published.TASKS:
    lines += task_section(task)
  return "\n".join(lines)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--check", action="store_true")
  args = parser.parse_args()
  text = render()
  if args.check:
    with open(OUT) as f:
      stale = f.read() != text
    if stale:
      print(f"{OUT} is stale: run python scripts/config_table.py", file=sys.stderr)
    return int(stale)
  with open(OUT, "w") as f:
    f.write(text)
  print(f"wrote {OUT}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
