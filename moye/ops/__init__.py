"""moye.ops: kernels that users call as functions, on NumPy arrays (the CPU
backend) and torch tensors (CUDA tensors on torch's current stream, CPU
tensors on the CPU backend). Each op is a moye kernel with a plan per
(dtype, row length, backend), cached so a repeat call does no planning.
On torch tensors each op is a torch.library custom op with autograd
(moye.ops.torch_ops, imported only when a torch tensor arrives).
Built on moye.compiler and moye.device; tutorials stay in moye.examples.
"""
from .functional import (attention, attention_backward, attention_varlen,
                         attention_varlen_backward, cross_entropy, cross_entropy_backward, cross_entropy_forward,
                         layer_norm, layer_norm_backward, layer_norm_forward, linear,
                         log_softmax, log_softmax_backward, matmul, rms_norm, rms_norm_backward,
                         rms_norm_forward, softmax, softmax_backward)

__all__ = ["softmax", "softmax_backward", "log_softmax", "log_softmax_backward", "rms_norm",
           "rms_norm_forward", "rms_norm_backward", "layer_norm", "layer_norm_forward",
           "layer_norm_backward", "cross_entropy", "cross_entropy_forward",
           "cross_entropy_backward", "matmul", "linear", "attention",
           "attention_backward", "attention_varlen", "attention_varlen_backward"]
