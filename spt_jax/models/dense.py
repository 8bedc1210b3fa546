"""`nn.Dense` layers with this backend's matmul: on XLA:CPU, a kernel gradient that runs in YNNPACK
rather than Eigen (`platform.kernel_grad_dot_general`); elsewhere nn.Dense's own.
"""
from __future__ import annotations

import flax.linen as nn

from spt_jax import platform


def Dense(features: int, **kwargs) -> nn.Dense:  # noqa: N802 (a module factory, named as one)
  """nn.Dense with this backend's `platform.dense_dot_general`; parameters and outputs are
  nn.Dense's."""
  return nn.Dense(features, dot_general=platform.dense_dot_general(), **kwargs)
