"""Named parameter groups for the mechanism ablations, usable wherever a pattern list is accepted.

`freeze`, `init_from.include/exclude` and the init-scale paths take entries that are either a preset
name below or a regex over '/'-joined parameter paths (full match). Presets expand to regexes, so
`--config.finetune.freeze=attention` and `--config.finetune.init_from.include=qk` name the paper's
ablations directly; several entries go in tuple syntax: `--config.finetune.freeze="('qk','mlp')"`.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from spt_jax import tree

_LAYER = r"encoder/layer_\d+"
PRESETS: dict[str, tuple[str, ...]] = {
    "qk": (rf"{_LAYER}/attention/(query|key)/.*",),                 # W_Q, W_K (and the query bias)
    "qkvo": (rf"{_LAYER}/attention/.*",),                           # W_Q, W_K, W_V, W_O
    "attention": (rf"{_LAYER}/attention/.*",),
    "mlp": (rf"{_LAYER}/mlp/.*",),
    "norms": (rf"{_LAYER}/norm_(attention|mlp)/.*", r"encoder/final_norm/.*"),
    # The input layer: token (and learned position) embeddings, or the projection of pixels.
    "embeddings": (r"encoder/(token_embedding/.*|position_embedding|input_projection/.*)",),
    "encoder": (r"encoder/.*",),
    "all_but_heads": (r"encoder/.*",),                              # everything except mlm_head/classifier
    "heads": (r"(mlm_head|classifier|pretrain_heads)/.*",),
    "all": (r".*",),
}


def expand(entries: Iterable[str]) -> list[str]:
  """Preset names → their regexes; any other entry is kept as a regex."""
  if isinstance(entries, str):  # A bare string is one entry, not a sequence of characters.
    entries = (entries,)
  out = []
  for entry in entries:
    out.extend(PRESETS.get(entry, (entry,)))
  return out


def resolve(entries: Iterable[str], params, *, what: str) -> list[str]:
  """Paths of `params` matched by `entries` (presets or regexes); an entry matching nothing raises."""
  return tree.match_patterns(expand(entries), tree.flatten(params), what=what)


def count_table(params, frozen: Iterable[str]) -> str:
  """Markdown table of trainable vs frozen parameter counts per group (first two path components)."""
  frozen = set(frozen)
  rows: dict[str, list[int]] = {}
  for path, leaf in tree.flatten(params).items():
    group = "/".join(path.split("/")[:2]) if path.startswith("encoder/") else path.split("/")[0]
    counts = rows.setdefault(group, [0, 0])
    counts[path in frozen] += int(np.prod(np.shape(leaf)))
  lines = ["| group | trainable | frozen |", "|---|---:|---:|"]
  lines += [f"| {g} | {t:,} | {f:,} |" for g, (t, f) in rows.items()]
  total_t, total_f = (sum(c[i] for c in rows.values()) for i in (0, 1))
  lines.append(f"| **total** | {total_t:,} | {total_f:,} |")
  return "\n".join(lines) + "\n"
