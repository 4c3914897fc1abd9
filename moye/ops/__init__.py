"""moye.ops: kernels that users call as functions, on NumPy arrays (the CPU
backend) and torch tensors (CUDA tensors on torch's current stream, CPU
tensors on the CPU backend). Each op is a moye kernel with a plan per
(dtype, row length, backend), cached so a repeat call does no planning.
Built on moye.compiler and moye.device; tutorials stay in moye.examples.
"""
from .layer_norm_op import layer_norm, layer_norm_backward
from .rms_norm_op import rms_norm, rms_norm_backward
from .softmax_op import softmax, softmax_backward

__all__ = ["softmax", "softmax_backward", "rms_norm", "rms_norm_backward", "layer_norm",
           "layer_norm_backward"]
