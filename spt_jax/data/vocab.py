"""Token vocabularies with the ids every model and objective relies on.

Special ids are the same for every task so that a checkpoint pretrained on one task's data can be
fine-tuned on another's (cross-task SPT): `<pad>` = 0, `<mask>` = 1, `<cls>` = 2.
"""
from __future__ import annotations

import dataclasses

import numpy as np

PAD_ID = 0
MASK_ID = 1
CLS_ID = 2
SPECIAL_TOKENS = ("<pad>", "<mask>", "<cls>")
NUM_SPECIAL = len(SPECIAL_TOKENS)


@dataclasses.dataclass(frozen=True)
class Vocabulary:
  """A fixed token list preceded by the special tokens."""
  tokens: tuple[str, ...]

  def __post_init__(self):
    clash = set(self.tokens) & set(SPECIAL_TOKENS)
    if clash:
      raise ValueError(f"Vocabulary tokens {sorted(clash)} collide with the special tokens.")
    if len(set(self.tokens)) != len(self.tokens):
      raise ValueError("Vocabulary tokens must be unique.")

  @property
  def size(self) -> int:
    return NUM_SPECIAL + len(self.tokens)

  @property
  def first_regular_id(self) -> int:
    return NUM_SPECIAL

  def id_of(self, token: str) -> int:
    try:
      return self._ids[token]
    except KeyError:
      raise KeyError(f"token {token!r} is not in the vocabulary {self.tokens}") from None

  @property
  def _ids(self) -> dict[str, int]:
    # Cached on the instance; frozen dataclasses need object.__setattr__.
    ids = self.__dict__.get("_ids_cache")
    if ids is None:
      ids = {t: NUM_SPECIAL + i for i, t in enumerate(self.tokens)}
      object.__setattr__(self, "_ids_cache", ids)
    return ids

  def decode(self, ids) -> list[str]:
    every = SPECIAL_TOKENS + self.tokens
    return [every[int(i)] for i in np.asarray(ids) if int(i) != PAD_ID]


# Byte-level text (IMDB, AAN) and 8-bit pixels share one shape of vocabulary: value v has id 3 + v.
BYTE_VOCAB = Vocabulary(tokens=tuple(f"<0x{b:02X}>" for b in range(256)))
