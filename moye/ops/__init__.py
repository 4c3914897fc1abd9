"""moye.ops: kernels that users call as functions, on NumPy arrays (the CPU
backend) and torch tensors (CUDA tensors on torch's current stream, CPU
tensors on the CPU backend). Each op is a moye kernel with a plan per
(dtype, row length, backend), cached so a repeat call does no planning.
Built on moye.compiler and moye.device; tutorials stay in moye.examples.
"""
from .softmax_op import softmax, softmax_backward
from .log_softmax_op import log_softmax, log_softmax_backward
from .cross_entropy_op import cross_entropy, cross_entropy_backward, cross_entropy_forward

__all__ = ["softmax", "softmax_backward", "log_softmax", "log_softmax_backward",
           "cross_entropy", "cross_entropy_forward", "cross_entropy_backward"]
