"""`nn.Dense` layers whose kernel gradient XLA:CPU runs in YNNPACK rather than Eigen.

A Dense layer's kernel gradient xᵀ·g contracts the token axis, which is the leading (major) axis of both
operands. XLA:CPU hands a dot to YNNPACK only as row-major [M, K]·[K, N], so by default it runs this one
as an Eigen dot with transposed operands. That is the slowest matmul of the train step: 4.7 ms on one
core for [2048, 512]ᵀ·[2048, 128], against 2.8 ms for a transposed copy of the narrower operand plus a
YNNPACK dot (benchmarks/README.md). `kernel_grad_dot_general` is a drop-in `dot_general` for nn.Dense
that spells the kernel gradient that way; the forward pass and the input gradient are unchanged.
"""
from __future__ import annotations


import flax.linen as nn
import jax
from jax import lax


def _matmul(x, kernel):
  return lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())))


@jax.custom_vjp
def _dense_matmul(x, kernel):
  return _matmul(x, kernel)


def _dense_matmul_fwd(x, kernel):
  return _matmul(x, kernel), (x, kernel)


def _dense_matmul_bwd(residuals, g):
  x, kernel = residuals
  dx = lax.dot_general(g, kernel, (((g.ndim - 1,), (1,)), ((), ())))
  x2, g2 = x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1])
  # The barriers stop XLA's transpose folding from merging each explicit transpose back into the dot
  # (which would restore the Eigen dot); XLA:CPU drops them before fusion, so they cost nothing. Which
  # operand gets transposed: the narrower one, the copy being the cost.
  if x2.shape[1] <= g2.shape[1]:
    d_kernel = lax.optimization_barrier(x2.T) @ g2
  else:
    d_kernel = lax.optimization_barrier(lax.optimization_barrier(g2.T) @ x2).T
  return dx, d_kernel.astype(kernel.dtype)


_dense_matmul.defvjp(_dense_matmul_fwd, _dense_matmul_bwd)


def kernel_grad_dot_general(x, kernel, dimension_numbers, precision=None,
                            preferred_element_type=None):
  """`lax.dot_general` as nn.Dense calls it (x's last axis against the kernel's first), with the
  kernel gradient computed in YNNPACK-friendly form. Anything else is refused, not silently changed."""
  (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
  if (tuple(lhs_contract) != (x.ndim - 1,) or tuple(rhs_contract) != (0,) or lhs_batch or rhs_batch
      or kernel.ndim != 2 or precision is not None or preferred_element_type is not None):
    raise ValueError(f"kernel_grad_dot_general handles nn.Dense's x @ kernel only, got dimension "
                     f"numbers {dimension_numbers} for shapes {x.shape} and {kernel.shape}, "
                     f"precision={precision}, preferred_element_type={preferred_element_type}.")
  return _dense_matmul(x, kernel)


def dense_dot_general():
  """The `dot_general` Dense layers use on this backend: ours on CPU; elsewhere (cuBLAS, TPU) the
  transposed operands are free and an explicit transpose would be a pure extra copy."""
  return kernel_grad_dot_general if jax.default_backend() == "cpu" else None


def Dense(features: int, **kwargs) -> nn.Dense:  # noqa: N802 (a module factory, named as one)
  """nn.Dense with this backend's `dense_dot_general`; parameters and outputs are nn.Dense's."""
  return nn.Dense(features, dot_general=dense_dot_general(), **kwargs)
