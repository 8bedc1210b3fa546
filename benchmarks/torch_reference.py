"""The spt_jax SequenceModel and its two train steps re-written in PyTorch, as a speed reference.

Same architecture, parameter layout and counts as `spt_jax.models.transformer.SequenceModel` with
position='sinusoidal', pooling='mean', activation='gelu', no dropout: N(0, 1) token embedding (or the
2→d projection of pixel inputs) plus fixed sinusoidal codes, pre-LN blocks (LayerNorm -> MHA with separate q/k/v/out projections, the key
without bias -> residual; LayerNorm -> Linear-GELU-Linear -> residual), a final LayerNorm, then either
per-token vocabulary logits ('mlm') or a classifier on the mean over real positions ('classifier').
The steps mirror `spt_jax.objectives` and `spt_jax.optim`: masked-token cross-entropy (or the pixel
L1 loss) with the mask drawn on the device every step, or classification cross-entropy; AdamW (0.9, 0.999, wd 0.01) decaying
matrices only.

Only `benchmarks/` imports this module: torch is an optional extra, never a dependency of spt_jax.
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

# The ids spt_jax.data.vocab fixes for every task; repeated here so this file needs no JAX.
PAD_ID = 0
MASK_ID = 1
# flax.linen.LayerNorm's default epsilon (torch's is 1e-5).
LAYER_NORM_EPS = 1e-6


def sinusoidal_encoding(length: int, d_model: int) -> torch.Tensor:
  position = torch.arange(length, dtype=torch.float64)[:, None]
  div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
  pe = torch.zeros(length, d_model, dtype=torch.float64)
  pe[:, 0::2] = torch.sin(position * div)
  pe[:, 1::2] = torch.cos(position * div)[:, : d_model // 2]
  return pe.float()


# What `Attention` computes between the projections: torch's fused kernel (the reference), the same
# softmax(q kᵀ/√d) v written out (as XLA runs it), or nothing but q + k + v (to time everything else).
ATTENTION_CORES = ("sdpa", "math", "none")


class Attention(nn.Module):

  def __init__(self, d_model: int, num_heads: int, core: str = "sdpa"):
    super().__init__()
    if core not in ATTENTION_CORES:
      raise ValueError(f"attention core {core!r} must be one of {ATTENTION_CORES}.")
    self.num_heads, self.core = num_heads, core
    self.query = nn.Linear(d_model, d_model)
    # No key bias, as in spt_jax: it shifts every score of a query equally, which softmax ignores.
    self.key = nn.Linear(d_model, d_model, bias=False)
    self.value = nn.Linear(d_model, d_model)
    self.out = nn.Linear(d_model, d_model)

  def forward(self, x, key_mask):
    b, length, d = x.shape
    heads = lambda t: t.view(b, length, self.num_heads, d // self.num_heads).transpose(1, 2)
    q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
    mask = key_mask[:, None, None, :]
    if self.core == "sdpa":
      # A boolean mask (True = attend) keeps torch on its fused CPU flash-attention kernel.
      o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    elif self.core == "math":
      scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)
      o = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1) @ v
    else:
      o = q + k + v
    return self.out(o.transpose(1, 2).reshape(b, length, d))


class Block(nn.Module):

  def __init__(self, d_model: int, num_heads: int, d_ff: int, attention_core: str = "sdpa"):
    super().__init__()
    self.norm_attention = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
    self.attention = Attention(d_model, num_heads, attention_core)
    self.norm_mlp = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
    self.dense_in = nn.Linear(d_model, d_ff)
    self.dense_out = nn.Linear(d_ff, d_model)

  def forward(self, x, key_mask):
    x = x + self.attention(self.norm_attention(x), key_mask)
    # flax's nn.gelu is the tanh approximation by default.
    return x + self.dense_out(F.gelu(self.dense_in(self.norm_mlp(x)), approximate="tanh"))


class SequenceModel(nn.Module):
  """Encoder + one head, as spt_jax's SequenceModel.

  inputs: token ids [B, L], document pairs [B, 2, L] (one shared encoder; the classifier sees
  [u, v, u*v, u-v] of the two pooled vectors) or 8-bit pixels [B, L] with `input_kind='pixels'`
  (the encoder sees (value·(1−m), m) through a 2→d projection, m the corruption mask).
  """

  def __init__(self, *, vocab_size: int, max_length: int, head: str, num_classes: int,
               num_layers: int, d_model: int, num_heads: int, d_ff: int,
               input_kind: str = "tokens", mlm_outputs: int = 0, pairs: bool = False,
               attention_core: str = "sdpa"):
    super().__init__()
    if head not in ("mlm", "classifier"):
      raise ValueError(f"head={head!r} must be 'mlm' or 'classifier'.")
    if input_kind not in ("tokens", "pixels"):
      raise ValueError(f"input_kind={input_kind!r} must be 'tokens' or 'pixels'.")
    self.head_kind, self.input_kind = head, input_kind
    if input_kind == "tokens":
      self.token_embedding = nn.Embedding(vocab_size, d_model)  # N(0, 1) init, as spt_jax
    else:
      self.input_projection = nn.Linear(2, d_model)
    self.register_buffer("positions", sinusoidal_encoding(max_length, d_model), persistent=False)
    self.layers = nn.ModuleList(Block(d_model, num_heads, d_ff, attention_core)
                                for _ in range(num_layers))
    self.final_norm = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
    if head == "mlm":
      self.head = nn.Linear(d_model, mlm_outputs or vocab_size)
    else:
      self.head = nn.Linear(d_model * (4 if pairs else 1), num_classes)

  def forward(self, inputs, pixel_mask=None):
    batch_shape = inputs.shape[:-1]
    inputs = inputs.reshape(-1, inputs.shape[-1])
    if self.input_kind == "tokens":
      key_mask = inputs != PAD_ID
      x = self.token_embedding(inputs)
    else:
      key_mask = torch.ones(inputs.shape, dtype=torch.bool, device=inputs.device)
      corrupted = (torch.zeros(inputs.shape, device=inputs.device) if pixel_mask is None
                   else pixel_mask.reshape(inputs.shape).float())
      value = inputs.float() / 255.0
      x = self.input_projection(torch.stack([value * (1.0 - corrupted), corrupted], dim=-1))
    x = x + self.positions[: inputs.shape[1]]
    for layer in self.layers:
      x = layer(x, key_mask)
    h = self.final_norm(x)
    if self.head_kind == "mlm":
      out = self.head(h)
      return out.reshape(*batch_shape, *out.shape[1:])
    m = key_mask[..., None].to(h.dtype)
    pooled = (h * m).sum(1) / m.sum(1).clamp_min(1.0)
    if len(batch_shape) == 2:  # a pair of documents per example
      pooled = pooled.reshape(*batch_shape, -1)
      u, v = pooled[:, 0], pooled[:, 1]
      pooled = torch.cat([u, v, u * v, u - v], dim=-1)
    return self.head(pooled)


def num_parameters(model: nn.Module) -> int:
  return sum(p.numel() for p in model.parameters())


def masked_token_loss(model, tokens, mask_rate: float):
  """Cross-entropy on a fresh random `mask_rate` of the real positions, like spt_jax's SPT objective.

  The loss is a mask-weighted mean over all positions rather than a gather of the masked ones: that
  keeps shapes static (no host sync on the mask's count, no recompiles under torch.compile) and does
  the same work as the JAX step, which also computes logits everywhere.
  """
  mask = (torch.rand(tokens.shape, device=tokens.device) < mask_rate) & (tokens != PAD_ID)
  logits = model(torch.where(mask, torch.full_like(tokens, MASK_ID), tokens))
  ce = F.cross_entropy(logits.flatten(0, -2).float(), tokens.flatten(), reduction="none")
  weight = mask.flatten().float()
  return (ce * weight).sum() / weight.sum().clamp_min(1.0)


def masked_pixel_loss(model, pixels, mask_rate: float, pixel_loss: str = "l1"):
  """spt_jax's pixel SPT: masked pixels zeroed and flagged; the normalised value predicted ('l1')
  or the 8-bit value classified 256 ways ('ce'), as `pixel_loss` in spt_jax.objectives.masked."""
  mask = torch.rand(pixels.shape, device=pixels.device) < mask_rate
  out = model(pixels, pixel_mask=mask)
  weight = mask.flatten().float() if pixel_loss == "ce" else mask.float()
  if pixel_loss == "ce":
    err = F.cross_entropy(out.flatten(0, -2).float(), pixels.flatten().long(), reduction="none")
  else:
    err = (out[..., 0].float() - pixels.float() / 255.0).abs()
  return (err * weight).sum() / weight.sum().clamp_min(1.0)


def classification_loss(model, tokens, labels):
  return F.cross_entropy(model(tokens).float(), labels)


def make_optimizer(model: nn.Module, learning_rate: float = 1e-3) -> torch.optim.Optimizer:
  # Weight decay on matrices only (embedding included), as spt_jax.optim's decay mask.
  decay = [p for p in model.parameters() if p.ndim >= 2]
  no_decay = [p for p in model.parameters() if p.ndim < 2]
  groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
  # The fused CPU kernel is torch's fastest AdamW; fall back where a build lacks it.
  try:
    return torch.optim.AdamW(groups, lr=learning_rate, betas=(0.9, 0.999), eps=1e-8, fused=True)
  except (RuntimeError, ValueError):
    return torch.optim.AdamW(groups, lr=learning_rate, betas=(0.9, 0.999), eps=1e-8, foreach=True)


OBJECTIVES = ("mlm", "pixel_mlm", "classification")


class TrainStep:
  """One optimiser step per call on a (inputs, labels) batch; `compile=True` uses torch.compile.

  The forward pass and loss are compiled together (AOTAutograd compiles the backward from them);
  the fused AdamW update stays eager, it is already a single kernel per parameter group.
  """

  def __init__(self, model: nn.Module, objective: str, *, mask_rate: float = 0.1,
               pixel_loss: str = "l1", compile: bool = False):
    if objective not in OBJECTIVES:
      raise ValueError(f"objective={objective!r} must be one of {OBJECTIVES}.")
    self.model = model
    self.optimizer = make_optimizer(model)
    if objective == "mlm":
      loss = lambda inputs, labels: masked_token_loss(self.model, inputs, mask_rate)
    elif objective == "pixel_mlm":
      loss = lambda inputs, labels: masked_pixel_loss(self.model, inputs, mask_rate,
                                                           pixel_loss)
    else:
      loss = lambda inputs, labels: classification_loss(self.model, inputs, labels)
    self.loss = torch.compile(loss, dynamic=False) if compile else loss
    self.compiled = compile

  def __call__(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    loss = self.loss(inputs, labels)
    loss.backward()
    self.optimizer.step()
    self.optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def build(*, objective: str, mask_rate: float = 0.1, pixel_loss: str = "l1",
          compile: bool = False, seed: int = 0, device: str = "cpu", **model_kwargs) -> TrainStep:
  """A TrainStep on a fresh SequenceModel(**model_kwargs) on `device`."""
  torch.manual_seed(seed)
  model = SequenceModel(**model_kwargs).to(device)
  return TrainStep(model, objective, mask_rate=mask_rate, pixel_loss=pixel_loss, compile=compile)


def synchronize(device: str) -> None:
  """Waits for queued kernels: CPU ops are synchronous, CUDA ones are not."""
  if torch.device(device).type == "cuda":
    torch.cuda.synchronize(device)


def matmul_peak_gflops(n: int = 2048, repeats: int = 5, device: str = "cpu") -> float:
  """Best-of-`repeats` float32 n×n×n matmul rate, in GFLOP/s."""
  a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
  torch.mm(a, b)
  synchronize(device)
  best = math.inf
  for _ in range(repeats):
    start = time.perf_counter()
    torch.mm(a, b)
    synchronize(device)
    best = min(best, time.perf_counter() - start)
  return 2 * n**3 / best / 1e9


def as_tensors(batch: dict[str, np.ndarray], input_kind: str = "tokens", device: str = "cpu"
               ) -> tuple[torch.Tensor, torch.Tensor]:
  """A numpy batch of the spt_jax pipeline as torch (inputs, labels); pixels stay 8-bit."""
  inputs = batch["inputs"]
  inputs = inputs.astype(np.uint8 if input_kind == "pixels" else np.int64)
  return (torch.from_numpy(inputs).to(device),
          torch.from_numpy(batch["labels"].astype(np.int64)).to(device))
