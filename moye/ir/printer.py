"""The IR as readable text: what `kern.ir(...)` prints."""
from .instr import For, If, Instr, Jump, While, format_operand as _fmt


def format_kernel(kernel):
    """The IR of a kernel as text: its parameters, arrays and body."""
    lines = [f"kernel {kernel.name}(" + ", ".join(f"{p.name}: {p.type}" for p in kernel.params)
             + ")"]
    for a in kernel.arrays:
        lines.append(f"  array {a!r}: {a.elem} {a.space}")
    _format_body(kernel.body, lines, "  ")
    return "\n".join(lines)


def format_instr(s):
    """One instruction as text: `%v3: Int32 = add(%v1, 4)`.
        >>> from moye.ir import Add, Value
        >>> from moye.types import Int32
        >>> format_instr(Add(Value(Int32, "x"), 4, result=Value(Int32)))  # doctest: +ELLIPSIS
        '%v...: Int32 = add(%x..., 4)'
    """
    return repr(s)


def _format_body(body, lines, ind):
    for s in body:
        if isinstance(s, Instr):
            lines.append(ind + format_instr(s))
        elif isinstance(s, For):
            unroll = f" unroll={s.unroll}" if s.unroll is not None else ""
            lines.append(f"{ind}for {s.var!r} in range({_fmt(s.start)}, {_fmt(s.stop)}, "
                         f"{_fmt(s.step)}){unroll}:")
            _format_body(s.body, lines, ind + "  ")
        elif isinstance(s, If):
            lines.append(f"{ind}if {_fmt(s.cond)}:")
            _format_body(s.then, lines, ind + "  ")
            if s.orelse:
                lines.append(f"{ind}else:")
                _format_body(s.orelse, lines, ind + "  ")
        elif isinstance(s, While):
            lines.append(f"{ind}while:")
            _format_body(s.cond_body, lines, ind + "    ")
            lines.append(f"{ind}  test {_fmt(s.cond)}")
            _format_body(s.body, lines, ind + "  ")
        elif isinstance(s, Jump):
            lines.append(ind + s.kind)
