"""moye.ops as PyTorch operators, registered the PyTorch way.

Every op is two `torch.library.custom_op`s in the namespace `moye`, the
forward (`moye::softmax`, `moye::rms_norm_forward`, ...) and its backward
(`moye::softmax_backward`, ...), so that torch.compile traces both as single
nodes; each has a fake implementation (the outputs' shapes, dtypes, strides
and device, for tracing), and the forward has an autograd formula
(`register_autograd`) whose backward calls the backward op. The table
`OPS` holds what differs between ops; `_register` does the rest once.

An op's implementation calls its raw host function (rows.raw): a CUDA tensor
runs the CUDA kernel on torch's current stream, a CPU tensor the CPU backend.
Outputs a raw function gives as None (no weight, no weight gradient) are
empty tensors here, since a custom op cannot return None.

This module imports torch; moye imports it only when a torch tensor reaches
a public op (rows.torch_ops), so moye works without torch.
"""
from dataclasses import dataclass
from typing import Callable

import torch

from ..errors import MoyeTypeError, ShapeError
from . import rows
from .attention_op import check_scale, seqlen_bound
from .cross_entropy_op import check_target
from .epilogue import check_activation

NAMESPACE = "moye"


@dataclass(frozen=True)
class TorchOp:
    """One op's forward and backward custom ops: their names (those of the
    raw host functions too), schemas and fake implementations; `save(ctx,
    inputs, output)` keeps what the backward needs, `grad(ctx, *grads)` gives
    the inputs' gradients (None where an input has none), calling the
    backward op; `forward_impl`/`backward_impl`, where given, adapt the raw
    function's outputs (None -> empty, dtypes)."""
    forward: str
    forward_schema: str
    forward_fake: Callable
    backward: str
    backward_schema: str
    backward_fake: Callable
    save: Callable
    grad: Callable
    forward_impl: Callable = None
    backward_impl: Callable = None


def op(name):
    """The registered custom op `moye::<name>` (torch.ops.moye.<name>)."""
    return getattr(getattr(torch.ops, NAMESPACE), name)


def run(name, *args):
    """Op `name` on `args`: the custom op where torch.compile traces or the
    arguments are not plain tensors (fake, functional, ...); otherwise, in
    eager mode, the same implementation without the custom op's dispatch
    (about 90 us of Python per call): through an autograd.Function of the
    same formula where a gradient is needed."""
    grad = False
    for a in args:
        t = type(a)
        if t is torch.Tensor or t is torch.nn.Parameter:
            grad = grad or a.requires_grad
        elif not (a is None or t is int or t is float or t is str or t is bool or
                  t is torch.dtype):
            return op(name)(*args)
    if torch.compiler.is_compiling():
        return op(name)(*args)
    impl, function = _EAGER[name]
    if not (grad and torch.is_grad_enabled()):
        return impl(*args)
    if function is None:        # a backward op: no formula of its own, torch's error
        return op(name)(*args)
    return function.apply(*args)


_EAGER = {}     # op name -> (its implementation, its autograd.Function or None)


# -- what the ops share --------------------------------------------------------------------

def _like_rows(x, dim, what, opname):
    """An empty tensor laid out as the raw functions lay out a result like
    `x` along `dim`: `dim` moved last, C-contiguous, moved back."""
    rows.dtype_name(x, what, opname)
    d = rows.check_dim(x, dim, what, opname)
    return rows.from_last(torch.empty_like(rows.to_last(x, d)), d, x.dim())


def _stats(x):
    """A tensor of one value per row of `x` (its last dim reduced): float32,
    float64 for float64 `x` (so that gradcheck sees float64 losses)."""
    return x.new_empty(x.shape[:-1], dtype=_stats_dtype(x))


def _stats_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _empty(like):
    return like.new_empty(0)


def _param_grad(g, param, x, opname, what):
    """The raw function's gradient `g` of a weight/bias `param` (None when
    there is none) as the op returns it: an empty tensor when `param` is
    None, else `param`'s dtype."""
    if param is None:
        return _empty(x)
    if g is None:
        raise MoyeTypeError(f"{opname}: the kernels gave no {what} although it was asked for")
    return g.to(param.dtype)


def _dense(t):
    """A gradient as the raw backward functions take it: C-contiguous (autograd
    hands over broadcast or strided ones, e.g. from `.sum()`)."""
    return t.contiguous()


def _check_params(x, opname, **params):
    rows.dtype_name(x, "x", opname)
    for what, p in params.items():
        if p is not None and tuple(p.shape) != (x.shape[-1],):
            raise ShapeError(f"{opname}: {what} has shape {tuple(p.shape)}; it must be "
                             f"({x.shape[-1]},), the length of x's last dimension")


# -- softmax, log_softmax: (x, dim) -> y; backward (y, dy, dim) -> dx ------------------------

def _rowwise(forward, backward):
    def forward_fake(x, dim):
        return _like_rows(x, dim, "x", forward)

    def backward_fake(y, dy, dim):
        rows.dtype_name(dy, "dy", backward)
        return _like_rows(y, dim, "y", backward)

    def save(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.dim = inputs[1]

    def grad(ctx, dy):
        y, = ctx.saved_tensors
        return run(backward, y, _dense(dy), ctx.dim), None

    return TorchOp(forward, "(Tensor x, int dim) -> Tensor", forward_fake,
                   backward, "(Tensor y, Tensor dy, int dim) -> Tensor", backward_fake, save,
                   grad)


# -- rms_norm: (x, weight?, eps) -> (y, rstd); backward -> (dx, dweight) -----------------------

def _rms_norm_forward_fake(x, weight, eps):
    _check_params(x, "rms_norm", weight=weight)
    return torch.empty_like(x, memory_format=torch.contiguous_format), _stats(x)


def _rms_norm_backward_fake(dy, x, weight, rstd):
    dweight = _empty(x) if weight is None else torch.empty_like(weight)
    return torch.empty_like(x, memory_format=torch.contiguous_format), dweight


def _rms_norm_backward_impl(dy, x, weight, rstd):
    dx, dweight = rows.raw("rms_norm_backward")(dy, x, weight, rstd)
    return dx, _param_grad(dweight, weight, x, "rms_norm_backward", "dweight")


def _rms_norm_save(ctx, inputs, output):
    x, weight, _ = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.mark_non_differentiable(output[1])


def _rms_norm_grad(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dweight = run("rms_norm_backward", _dense(dy), x, weight, rstd)
    return dx, (None if weight is None else dweight), None


# -- layer_norm: (x, weight?, bias?, eps) -> (y, mean, rstd); backward -> (dx, dw, db) ---------
# The backward op gives dweight and dbias when weight is given (empty tensors
# otherwise): a bias without a weight gets its gradient, the sum of dy over
# the rows, in the autograd formula.

def _layer_norm_forward_fake(x, weight, bias, eps):
    _check_params(x, "layer_norm", weight=weight, bias=bias)
    return (torch.empty_like(x, memory_format=torch.contiguous_format), _stats(x), _stats(x))


def _layer_norm_backward_fake(dy, x, weight, mean, rstd):
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    if weight is None:
        return dx, _empty(x), _empty(x)
    return dx, torch.empty_like(weight), torch.empty_like(weight)


def _layer_norm_backward_impl(dy, x, weight, mean, rstd):
    dx, dweight, dbias = rows.raw("layer_norm_backward")(dy, x, weight, mean, rstd)
    if weight is None:
        return dx, _empty(x), _empty(x)
    if dbias is None:
        dbias = _sum_rows(dy)
    return (dx, _param_grad(dweight, weight, x, "layer_norm_backward", "dweight"),
            dbias.to(weight.dtype))


def _sum_rows(dy):
    return dy.reshape(-1, dy.shape[-1]).sum(0, dtype=_stats_dtype(dy))


def _layer_norm_save(ctx, inputs, output):
    x, weight, bias, _ = inputs
    ctx.save_for_backward(x, weight, output[1], output[2])
    ctx.bias_dtype = None if bias is None else bias.dtype
    ctx.mark_non_differentiable(output[1], output[2])


def _layer_norm_grad(ctx, dy, _dmean, _drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    dy = _dense(dy)
    dx, dweight, dbias = run("layer_norm_backward", dy, x, weight, mean, rstd)
    if ctx.bias_dtype is None:
        dbias = None
    elif weight is None:
        dbias = _sum_rows(dy).to(ctx.bias_dtype)
    return dx, (None if weight is None else dweight), dbias, None


# -- cross_entropy: (logits, target, ignore_index) -> (loss, lse) per row; backward -> dlogits --

def _cross_entropy_forward_fake(logits, target, ignore_index):
    _check_cross_entropy(logits, target)
    return _stats(logits), _stats(logits)


def _cross_entropy_backward_fake(dloss, logits, target, lse, ignore_index):
    return torch.empty_like(logits, memory_format=torch.contiguous_format)


def _cross_entropy_save(ctx, inputs, output):
    logits, target, ignore_index = inputs
    ctx.save_for_backward(logits, target, output[1])
    ctx.ignore_index = ignore_index
    ctx.mark_non_differentiable(output[1])


def _cross_entropy_grad(ctx, dloss, _dlse):
    logits, target, lse = ctx.saved_tensors
    dlogits = run("cross_entropy_backward", _dense(dloss.to(lse.dtype)), logits, target, lse,
                                           ctx.ignore_index)
    return dlogits, None, None


def _check_cross_entropy(logits, target, opname="cross_entropy"):
    """The raw op's checks of logits and target (kinds, dtypes, shapes,
    devices), before tracing or dispatch."""
    rows.dtype_name(logits, "logits", opname)
    check_target(logits, target, -100, opname)


# -- the table ---------------------------------------------------------------------------------

OPS = {
    "softmax": _rowwise("softmax", "softmax_backward"),
    "log_softmax": _rowwise("log_softmax", "log_softmax_backward"),
    "rms_norm": TorchOp(
        "rms_norm_forward", "(Tensor x, Tensor? weight, float eps) -> (Tensor, Tensor)",
        _rms_norm_forward_fake,
        "rms_norm_backward",
        "(Tensor dy, Tensor x, Tensor? weight, Tensor rstd) -> (Tensor, Tensor)",
        _rms_norm_backward_fake, _rms_norm_save, _rms_norm_grad,
        backward_impl=_rms_norm_backward_impl),
    "layer_norm": TorchOp(
        "layer_norm_forward",
        "(Tensor x, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)",
        _layer_norm_forward_fake,
        "layer_norm_backward",
        "(Tensor dy, Tensor x, Tensor? weight, Tensor mean, Tensor rstd) "
        "-> (Tensor, Tensor, Tensor)",
        _layer_norm_backward_fake, _layer_norm_save, _layer_norm_grad,
        backward_impl=_layer_norm_backward_impl),
    "cross_entropy": TorchOp(
        "cross_entropy_forward",
        "(Tensor logits, Tensor target, int ignore_index) -> (Tensor, Tensor)",
        _cross_entropy_forward_fake,
        "cross_entropy_backward",
        "(Tensor dloss, Tensor logits, Tensor target, Tensor lse, int ignore_index) -> Tensor",
        _cross_entropy_backward_fake, _cross_entropy_save, _cross_entropy_grad),
}


def _calling_raw(name):
    def impl(*args):
        return rows.raw(name)(*args)
    impl.__name__ = name
    return impl


def _register(spec):
    impls = {}
    for name, schema, fake, impl in (
            (spec.forward, spec.forward_schema, spec.forward_fake, spec.forward_impl),
            (spec.backward, spec.backward_schema, spec.backward_fake, spec.backward_impl)):
        impls[name] = impl or _calling_raw(name)
        custom = torch.library.custom_op(f"{NAMESPACE}::{name}", impls[name],
                                         mutates_args=(), schema=schema)
        custom.register_fake(fake)
    torch.library.register_autograd(f"{NAMESPACE}::{spec.forward}", spec.grad,
                                    setup_context=spec.save)
    _EAGER[spec.forward] = impls[spec.forward], _function(spec, impls[spec.forward])
    _EAGER[spec.backward] = impls[spec.backward], None


def _function(spec, impl):
    """The op's autograd formula as a torch.autograd.Function."""
    def forward(ctx, *args):
        out = impl(*args)
        spec.save(ctx, args, out)
        return out

    def backward(ctx, *grads):
        return spec.grad(ctx, *grads)
    return type(f"{spec.forward}_function", (torch.autograd.Function,),
                {"forward": staticmethod(forward), "backward": staticmethod(backward)})


for _spec in OPS.values():
    _register(_spec)


# -- the public ops on torch tensors (moye.ops.functional calls these) -------------------------

def check_devices(opname, **tensors):
    """Refuse arguments that are not all torch tensors on one CPU or CUDA
    device (None ones skipped): the kernels run on those alone (a meta
    tensor has no memory to read)."""
    device = None
    for what, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise MoyeTypeError(f"{opname}: {what} is a {type(t).__name__}, but other arguments "
                                "are torch tensors; pass all as torch tensors or all as NumPy "
                                "arrays")
        if device is None:
            device, first = t.device, what
        elif t.device != device:
            raise MoyeTypeError(f"{opname}: {what} is on {t.device} but {first} is on {device}; "
                                "they must be on the same device")
    if device is not None and device.type not in ("cpu", "cuda"):
        raise MoyeTypeError(f"{opname}: {first} is on {device}; moye takes CPU and CUDA tensors")


def softmax(x, dim):
    check_devices("softmax", x=x)
    return run("softmax", x, rows.check_dim(x, dim, "x", "softmax"))


def softmax_backward(y, dy, dim):
    check_devices("softmax_backward", y=y, dy=dy)
    return run("softmax_backward", y, dy, rows.check_dim(y, dim, "y", "softmax_backward"))


def log_softmax(x, dim):
    check_devices("log_softmax", x=x)
    return run("log_softmax", x, rows.check_dim(x, dim, "x", "log_softmax"))


def log_softmax_backward(y, dy, dim):
    check_devices("log_softmax_backward", y=y, dy=dy)
    return run("log_softmax_backward", y, dy, rows.check_dim(y, dim, "y", "log_softmax_backward"))


def rms_norm_forward(x, weight, eps):
    check_devices("rms_norm_forward", x=x, weight=weight)
    return run("rms_norm_forward", x, weight, eps)


def rms_norm_backward(dy, x, weight, rstd):
    check_devices("rms_norm_backward", dy=dy, x=x, weight=weight, rstd=rstd)
    dx, dweight = run("rms_norm_backward", dy, x, weight, rstd)
    return dx, (None if weight is None else dweight)


def layer_norm_forward(x, weight, bias, eps):
    check_devices("layer_norm_forward", x=x, weight=weight, bias=bias)
    return run("layer_norm_forward", x, weight, bias, eps)


def layer_norm_backward(dy, x, weight, mean, rstd):
    check_devices("layer_norm_backward", dy=dy, x=x, weight=weight, mean=mean, rstd=rstd)
    dx, dweight, dbias = run("layer_norm_backward", dy, x, weight, mean, rstd)
    return (dx, None, None) if weight is None else (dx, dweight, dbias)


def cross_entropy(logits, target, ignore_index, reduction):
    """The loss per row by the custom op, reduced in torch ops (so that
    torch.compile traces it): "mean" divides by the rows whose target is not
    `ignore_index` (0/0 -> nan, as torch)."""
    check_devices("cross_entropy", logits=logits, target=target)
    _check_cross_entropy(logits, target)
    loss = run("cross_entropy_forward", logits, target, ignore_index)[0]
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / (target != ignore_index).sum()


def cross_entropy_forward(logits, target, ignore_index):
    check_devices("cross_entropy_forward", logits=logits, target=target)
    _check_cross_entropy(logits, target, "cross_entropy_forward")
    return run("cross_entropy_forward", logits, target, ignore_index)


def cross_entropy_backward(dloss, logits, target, lse, ignore_index):
    check_devices("cross_entropy_backward", dloss=dloss, logits=logits, target=target, lse=lse)
    return run("cross_entropy_backward", dloss, logits, target, lse, ignore_index)


# -- matmul: (a, b, bias?, residual?, activation?, alpha, out_dtype?, allow_tf32) -> out ----------
# One custom op, whose backward GEMMs are calls of the op itself. With an
# activation, the backward recomputes the product before it (one GEMM more)
# rather than the forward keeping it.

MATMUL_SCHEMA = ("(Tensor a, Tensor b, Tensor? bias, Tensor? residual, str? activation, "
                 "float alpha, ScalarType? out_dtype, bool allow_tf32=False) -> Tensor")


def _matmul_impl(a, b, bias, residual, activation, alpha, out_dtype, allow_tf32=False):
    return rows.raw("matmul")(a, b, bias, activation, residual, alpha, None, out_dtype,
                              allow_tf32)


def _matmul_fake(a, b, bias, residual, activation, alpha, out_dtype, allow_tf32=False):
    shape, _ = rows.raw("output_shape")(a, b)
    rows.raw("input_type")(a, b, allow_tf32)
    return a.new_empty(shape, dtype=out_dtype or a.dtype)


def _matmul_save(ctx, inputs, output):
    a, b, bias, residual, activation, alpha = inputs[:6]
    ctx.save_for_backward(a, b, bias)
    ctx.activation, ctx.alpha = activation, alpha
    ctx.allow_tf32 = inputs[7] if len(inputs) > 7 else False
    ctx.residual_dtype = None if residual is None else residual.dtype


def _matmul_grad(ctx, dy):
    """The gradients of the op's inputs: GEMMs of the op itself, with the
    forward's allow_tf32 (float32 operands: tf32 backward GEMMs too)."""
    a, b, bias = ctx.saved_tensors
    tf32 = ctx.allow_tf32
    g = dy
    if ctx.activation is not None:
        pre = run("matmul", a, b, bias, None, None, ctx.alpha, torch.float32, tf32)
        g = _activation_backward(dy.float(), pre, ctx.activation)
    g = g.to(a.dtype)
    da = db = None
    if ctx.needs_input_grad[0]:
        da = run("matmul", g, b.mT, None, None, None, ctx.alpha, None, tf32)
        da = da.sum(0) if a.dim() == 2 and da.dim() == 3 else da
    if ctx.needs_input_grad[1]:
        if b.dim() == 2 and a.dim() == 3:      # b shared by the batches: their sum, folded
            db = run("matmul", a.reshape(-1, a.shape[-1]).mT, g.reshape(-1, g.shape[-1]), None,
                     None, None, ctx.alpha, None, tf32)
        else:
            db = run("matmul", a.mT, g, None, None, None, ctx.alpha, None, tf32)
    dbias = None if bias is None else g.reshape(-1, g.shape[-1]).sum(0, dtype=torch.float32) \
        .to(bias.dtype)
    dresidual = None if ctx.residual_dtype is None else dy.to(ctx.residual_dtype)
    return da, db, dbias, dresidual, None, None, None, None


def _activation_backward(dy, pre, activation):
    """dy * activation'(pre), by torch's own backward ops."""
    if activation == "relu":
        return dy * (pre > 0)
    if activation in ("gelu", "gelu_tanh"):
        return torch.ops.aten.gelu_backward(dy, pre, approximate="tanh" if
                                            activation == "gelu_tanh" else "none")
    return torch.ops.aten.silu_backward(dy, pre)


class _MatmulSpec:
    forward = "matmul"
    save, grad = staticmethod(_matmul_save), staticmethod(_matmul_grad)


def _register_matmul():
    torch.library.custom_op(f"{NAMESPACE}::matmul", _matmul_impl, mutates_args=(),
                            schema=MATMUL_SCHEMA).register_fake(_matmul_fake)
    torch.library.register_autograd(f"{NAMESPACE}::matmul", _matmul_grad,
                                    setup_context=_matmul_save)
    _EAGER["matmul"] = _matmul_impl, _function(_MatmulSpec, _matmul_impl)


_register_matmul()


ATTENTION_SCHEMA = "(Tensor q, Tensor k, Tensor v, bool causal, float? scale) -> (Tensor, Tensor)"
ATTENTION_BACKWARD_SCHEMA = ("(Tensor do, Tensor? dlse, Tensor q, Tensor k, Tensor v, Tensor o, "
                             "Tensor lse, bool causal, float? scale) -> (Tensor, Tensor, Tensor)")


def _attention_backward_impl(do, dlse, q, k, v, o, lse, causal, scale):
    return rows.raw("attention_backward")(do, q, k, v, o, lse, causal, scale, dlse)


def _attention_fake(q, k, v, causal, scale):
    B, Hq, Sq, d = rows.raw("check_operands")(q, k, v)
    return q.new_empty((B, Hq, Sq, d)), q.new_empty((B, Hq, Sq), dtype=torch.float32)


def _attention_backward_fake(do, dlse, q, k, v, o, lse, causal, scale):
    return _grads_like(q, k, v)


def _grads_like(*tensors):
    """New contiguous tensors like `tensors` (the backward ops' gradients)."""
    return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors)


def _attention_save(ctx, inputs, output):
    q, k, v, ctx.causal, ctx.scale = inputs
    ctx.save_for_backward(q, k, v, *output)


def _attention_grad(ctx, do, dlse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = run("attention_backward", do, dlse, q, k, v, o, lse, ctx.causal, ctx.scale)
    return dq, dk, dv, None, None


_register(TorchOp("attention_forward", ATTENTION_SCHEMA, _attention_fake, "attention_backward",
                  ATTENTION_BACKWARD_SCHEMA, _attention_backward_fake, _attention_save,
                  _attention_grad, backward_impl=_attention_backward_impl))


VARLEN_SCHEMA = ("(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
                 "int max_seqlen_q, int max_seqlen_k, bool causal, float? scale) -> (Tensor, Tensor)")
VARLEN_BACKWARD_SCHEMA = (
    "(Tensor do, Tensor? dlse, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, "
    "Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, bool causal, "
    "float? scale) -> (Tensor, Tensor, Tensor)")


def _varlen_backward_impl(do, dlse, q, k, v, o, lse, cu_q, cu_k, max_q, max_k, causal, scale):
    return rows.raw("attention_varlen_backward")(do, q, k, v, o, lse, cu_q, cu_k, max_q, max_k,
                                                 causal, scale, dlse)


def _varlen_fake(q, k, v, cu_q, cu_k, max_q, max_k, causal, scale):
    return q.new_empty(q.shape), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


def _varlen_backward_fake(do, dlse, q, k, v, o, lse, cu_q, cu_k, max_q, max_k, causal, scale):
    return _grads_like(q, k, v)


def _varlen_save(ctx, inputs, output):
    q, k, v, cu_q, cu_k, ctx.max_q, ctx.max_k, ctx.causal, ctx.scale = inputs
    ctx.save_for_backward(q, k, v, cu_q, cu_k, *output)


def _varlen_grad(ctx, do, dlse):
    q, k, v, cu_q, cu_k, o, lse = ctx.saved_tensors
    dq, dk, dv = run("attention_varlen_backward", do, dlse, q, k, v, o, lse, cu_q, cu_k,
                     ctx.max_q, ctx.max_k, ctx.causal, ctx.scale)
    return dq, dk, dv, None, None, None, None, None, None


_register(TorchOp("attention_varlen_forward", VARLEN_SCHEMA, _varlen_fake,
                  "attention_varlen_backward", VARLEN_BACKWARD_SCHEMA, _varlen_backward_fake,
                  _varlen_save, _varlen_grad, backward_impl=_varlen_backward_impl))


def attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, return_lse):
    """The public attention_varlen on torch tensors: the custom op (o, lse)."""
    opname = "attention_varlen"
    check_devices(opname, q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    scale = _scale(scale, q, opname)
    max_q, max_k = (seqlen_bound(n, what, opname)
                    for n, what in ((max_q, "max_seqlen_q"), (max_k, "max_seqlen_k")))
    o, lse = run("attention_varlen_forward", q, k, v, cu_q, cu_k, max_q, max_k,
                 rows.flag(causal, "causal", opname), scale)
    return (o, lse) if rows.flag(return_lse, "return_lse", opname) else o


def attention_varlen_backward(do, q, k, v, o, lse, cu_q, cu_k, max_q, max_k, causal, scale, dlse):
    opname = "attention_varlen_backward"
    check_devices(opname, do=do, q=q, k=k, v=v, o=o, lse=lse, cu_seqlens_q=cu_q,
                  cu_seqlens_k=cu_k, dlse=dlse)
    scale = _scale(scale, q, opname)
    max_q, max_k = (seqlen_bound(n, what, opname)
                    for n, what in ((max_q, "max_seqlen_q"), (max_k, "max_seqlen_k")))
    return run("attention_varlen_backward", do, dlse, q, k, v, o, lse, cu_q, cu_k, max_q, max_k,
               rows.flag(causal, "causal", opname), scale)


def _scale(scale, q, opname):
    """The scores' scale checked (None stays None) before the schema's float
    sees it."""
    return None if scale is None else check_scale(scale, q.shape[-1] if q.dim() else 1, opname)


def attention(q, k, v, causal, scale, return_lse):
    """The public attention on torch tensors: the custom op (o, lse)."""
    check_devices("attention", q=q, k=k, v=v)
    o, lse = run("attention_forward", q, k, v, rows.flag(causal, "causal", "attention"),
                 _scale(scale, q, "attention"))
    return (o, lse) if rows.flag(return_lse, "return_lse", "attention") else o


def attention_backward(do, q, k, v, o, lse, causal, scale, dlse):
    check_devices("attention_backward", do=do, q=q, k=k, v=v, o=o, lse=lse, dlse=dlse)
    return run("attention_backward", do, dlse, q, k, v, o, lse,
               rows.flag(causal, "causal", "attention_backward"),
               _scale(scale, q, "attention_backward"))


def matmul(a, b, bias, activation, residual, alpha, out, out_dtype, allow_tf32=False):
    """The public matmul on torch tensors: the custom op, or with `out`
    (which autograd and torch.compile do not take) the raw function."""
    check_devices("matmul", a=a, b=b, bias=bias, residual=residual, out=out)
    check_activation(activation, "matmul")      # before the custom op's schema sees it
    if out_dtype is not None and not isinstance(out_dtype, torch.dtype):   # a name, NumPy's
        out_dtype = getattr(torch, rows.raw("type_name")(out_dtype, "matmul"))
    if out is not None:
        if torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                           for t in (a, b, bias, residual, out)):
            raise MoyeTypeError("matmul: out= takes no tensors that require grad (as torch's "
                                "out= functions)")
        return rows.raw("matmul")(a, b, bias, activation, residual, alpha, out, out_dtype,
                                  allow_tf32)
    return run("matmul", a, b, bias, residual, activation, float(alpha), out_dtype, allow_tf32)
