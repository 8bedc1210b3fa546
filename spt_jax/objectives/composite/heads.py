"""The composite objective's parameters beyond the encoder: one head per loss under
`pretrain_heads/<loss>` (built by the loss, losses.py), and GraP's downstream probe."""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from spt_jax.objectives.composite.losses import TABLE


class Probe(nn.Module):
  """GraP's downstream classifier: linear on pooled z [B, D] ('pooled_linear'), or an MLP on every
  token z [B, L, D] ('token_mlp'), giving per-token logits [B, L, C]."""
  kind: str
  hidden: int
  num_classes: int

  @nn.compact
  def __call__(self, x):
    if self.kind == "token_mlp":
      x = nn.relu(nn.Dense(self.hidden, name="hidden")(x))
    return nn.Dense(self.num_classes, name="out")(x)

  def example(self, d_model: int):
    """A zero input of the shape this probe reads, to initialise it from."""
    return jnp.zeros((1, 2, d_model) if self.kind == "token_mlp" else (1, d_model), jnp.float32)


class PretrainHeads(nn.Module):
  """The heads on z, one per loss (token logits, projection or time regression), and the GraP probe
  when it is a model parameter ('shared')."""
  losses: tuple[str, ...]
  vocab_size: int
  random_classes: int
  projection_dim: int
  probe_kind: str = ""    # '' = no probe here; else Probe's kind, built as grap_probe in setup
  probe_hidden: int = 0
  num_classes: int = 0

  def setup(self):
    # Attribute names are the parameter names: pretrain_heads/<loss>, pretrain_heads/grap_probe.
    for name in self.losses:
      setattr(self, name, TABLE[name].head(self))
    if self.probe_kind:
      self.grap_probe = Probe(self.probe_kind, self.probe_hidden, self.num_classes)

  def token_logits(self, name: str, z):
    return getattr(self, name)(z)

  def sequence_head(self, name: str, pooled):
    return getattr(self, name)(pooled)

  def probe_logits(self, x):
    return self.grap_probe(x)

  def __call__(self, z, pooled):
    """Touches every head (for init)."""
    out = [self.token_logits(n, z) for n in self.losses if not TABLE[n].per_sequence]
    out += [self.sequence_head(n, pooled) for n in self.losses if TABLE[n].per_sequence]
    if self.probe_kind:
      out.append(self.probe_logits(z if self.probe_kind == "token_mlp" else pooled))
    return out
