"""Span masking, `objective='span'`: masked-token prediction where the masked positions come in
contiguous spans (SpanBERT, Joshi et al. 2020; T5's span corruption without the sentinels).

Spans start independently at each position and have geometric lengths of mean `span_length`, so
that about `mask_rate` of the real tokens are masked; each masked token is predicted by the mlm head
from the corrupted sequence. Against `mlm` at the same rate, a masked token's neighbours are more
often masked too, so the nearest context is less often available: the objective that tests whether
SPT's benefit rests on reading adjacent tokens. Tokens only: pixel data has its own masked objective.
"""
from __future__ import annotations

import dataclasses

import jax

from spt_jax import masking
from spt_jax.models.transformer import SequenceModel
from spt_jax.objectives import register
from spt_jax.objectives.base import example_weights
from spt_jax.objectives.masked import MaskedTokenPrediction


@register
@dataclasses.dataclass(frozen=True)
class SpanPrediction(MaskedTokenPrediction):
  name = "span"
  span_length: float = 3.0

  @staticmethod
  def config_fields() -> dict:
    return dict(
        mask_rate=0.15,             # expected fraction of real tokens inside spans
        span_length=3.0,            # mean span length (geometric; 1 = independent positions, as mlm)
        bert_mix=False)             # BERT's 80/10/10 replacement instead of always <mask>

  @staticmethod
  def validate(p, phase: str) -> None:
    if not 0 < p.mask_rate < 1:
      raise ValueError(f"config.{phase}.mask_rate={p.mask_rate} must be in (0, 1).")
    if not p.span_length >= 1:
      raise ValueError(f"config.{phase}.span_length={p.span_length} must be >= 1 (a mean length "
                       f"in tokens).")
    if p.mask_rate / p.span_length > 1:
      raise ValueError(f"config.{phase}: mask_rate / span_length = "
                       f"{p.mask_rate / p.span_length} must be <= 1 (the span start probability).")

  @classmethod
  def from_config(cls, config, phase, task, model_config):
    p = config[phase]
    if task.input_kind != "tokens":
      raise ValueError(f"config.{phase}.objective='span' masks token sequences; {task.name} has "
                       f"{task.input_kind} inputs (use objective='mlm').")
    return cls(SequenceModel(model_config, head="mlm"), mask_rate=float(p.mask_rate),
               bert_mix=p.bert_mix, first_regular_id=task.vocab.first_regular_id,
               vocab_size=task.vocab.size, span_length=float(p.span_length))

  def corrupted(self, batch, rng):
    mask_rng, corrupt_rng, _ = jax.random.split(rng, 3)
    tokens = batch["inputs"]
    mask = (masking.span_mask(mask_rng, tokens, self.mask_rate, self.span_length)
            & (example_weights(batch, tokens) > 0))
    return mask, masking.corrupt(corrupt_rng, tokens, mask, bert_mix=self.bert_mix,
                                 first_regular_id=self.first_regular_id, vocab_size=self.vocab_size)
