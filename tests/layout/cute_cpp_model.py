"""A direct, deliberately naive transcription of CuTe 4.x's static layout
algorithms (include/cute/layout.hpp) for the tests to compare moye against.

Layouts are (shape, stride) pairs of plain ints / nested tuples. Every
static_assert of the C++ code raises RefError here. Only static values.
(Not to be confused with cute_reference/, the corpus from CuTe's Python DSL.)

Known difference from the DSL: detail::SortByKey uses cute::exchange_sort,
which is not stable, so right_inverse/left_inverse of layouts with equal
strides (never injective) order the tied modes differently from the DSL.
"""


class RefError(Exception):
    """A static_assert of CuTe fired."""


def flat(t):
    if isinstance(t, tuple):
        out = []
        for e in t:
            out.extend(flat(e))
        return out
    return [t]


def prod(t):
    r = 1
    for x in flat(t):
        r *= x
    return r


def cdiv(a, b):                       # (a + b - 1) / b, C++ integer division
    q = abs(a + b - 1) // abs(b)
    return q if (a + b - 1) * b >= 0 else -q


def sign(x):
    return (x > 0) - (x < 0)


def unwrap(seq):
    return seq[0] if len(seq) == 1 else tuple(seq)


def bw_coalesce(fs, fd, ns, nd):
    """detail::bw_coalesce: walk the flat modes right to left onto ns:nd."""
    shapes, strides = [ns], [nd]
    for i in range(len(fs) - 2, -1, -1):
        s, d = fs[i], fd[i]
        if s == 1:
            continue
        if len(shapes) == 1 and shapes[0] == 1:
            shapes, strides = [s], [d]
        elif s * d == strides[0]:
            shapes[0], strides[0] = s * shapes[0], d
        else:
            shapes.insert(0, s)
            strides.insert(0, d)
    if len(shapes) == 1 and shapes[0] == 1:
        return (1, 0)
    return (unwrap(shapes), unwrap(strides))


def coalesce(layout):
    fs, fd = flat(layout[0]), flat(layout[1])
    return bw_coalesce(fs, fd, fs[-1], fd[-1])


def coalesce_x(layout):
    fs, fd = flat(layout[0]), flat(layout[1])
    return bw_coalesce(fs, fd, 2 if fs[-1] == 1 else fs[-1], fd[-1])


def _composition_impl(ls, ld, rs, rd):
    if isinstance(rs, tuple):
        parts = [_composition_impl(ls, ld, s, d) for s, d in zip(rs, rd)]
        return (tuple(p[0] for p in parts), tuple(p[1] for p in parts))
    if rd == 0:
        return (rs, rd)
    if not isinstance(ls, tuple):
        return (rs, rd * ld)
    res_s, res_d, rest_s, rest_d = [], [], rs, rd
    for cs, cd in zip(ls[:-1], ld[:-1]):
        if not (rest_d % cs == 0 or rest_d < cs):
            raise RefError("Stride Divisibility Condition")
        next_shape = cdiv(cs, abs(rest_d))
        next_stride = cdiv(abs(rest_d), cs) * sign(rest_d)
        if next_shape == 1 or rest_s == 1:
            rest_d = next_stride
            continue
        new_shape = min(next_shape, rest_s)
        if rest_s % new_shape != 0:
            raise RefError("Shape Divisibility Condition")
        res_s.append(new_shape)
        res_d.append(rest_d * cd)
        rest_s, rest_d = rest_s // new_shape, next_stride
    if not res_s:
        return (rest_s, rest_d * ld[-1])
    if rest_s == 1:
        return (unwrap(res_s), unwrap(res_d))
    return (tuple(res_s) + (rest_s,), tuple(res_d) + (rest_d * ld[-1],))


def composition(a, b):
    """composition(Layout, Layout)."""
    fl = coalesce_x(a)
    return _composition_impl(fl[0], fl[1], b[0], b[1])


def _filter_zeros(shape, stride):
    if isinstance(stride, tuple):
        return tuple(_filter_zeros(s, d) for s, d in zip(shape, stride))
    if stride == 0:
        return tuple(_filter_zeros(s, 0) for s in shape) if isinstance(shape, tuple) else 1
    return shape


def filter(layout):
    return coalesce((_filter_zeros(layout[0], layout[1]), layout[1]))


def _compact_left(shape, cur):
    if isinstance(shape, tuple):
        out = []
        for s in shape:
            d, cur = _compact_left(s, cur)
            out.append(d)
        return tuple(out), cur
    if shape == 1:
        return 0, cur
    return cur, cur * shape


def _ceil_div_tuple(a, b):
    if isinstance(a, tuple):
        out = []
        for ai in a:
            out.append(_ceil_div_tuple(ai, b))
            b = _ceil_div_tuple(b, prod(ai))
        return tuple(out)
    return cdiv(a, b)


def complement(layout, cotarget):
    """complement(Layout, CoTarget) with an int or static-shape cotarget."""
    shape, stride = filter(layout)
    if not isinstance(stride, tuple) and stride == 0:
        cs = prod(cotarget)
        return (cs, _compact_left(cs, 1)[0])
    sh = list(shape) if isinstance(shape, tuple) else [shape]
    st = list(stride) if isinstance(stride, tuple) else [stride]
    R = len(sh)
    res_s, res_d = [], [1]
    for i in range(R - 1):
        m = min(st)
        k = st.index(m)
        new_shape = m // res_d[i]
        if new_shape == 0:
            raise RefError("Non-injective Layout detected in complement.")
        res_s.append(new_shape)
        res_d.append(m * sh[k])
        del sh[k], st[k]
    new_shape = st[0] // res_d[R - 1]
    if new_shape == 0:
        raise RefError("Non-injective Layout detected in complement.")
    res_s.append(new_shape)
    new_stride = st[0] * sh[0]
    rest_shape = prod(_ceil_div_tuple(cotarget, new_stride))     # coalesce(static shape)
    rest_stride = _compact_left(rest_shape, new_stride)[0]
    return coalesce(((tuple(res_s), rest_shape), (tuple(res_d), rest_stride)))


def exchange_sort_order(keys):
    """The order detail::SortByKey produces: cute::exchange_sort (int_tuple.hpp),
    which is not a stable sort."""
    a = [(k, i) for i, k in enumerate(keys)]
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            if a[j][0] < a[i][0]:
                a[i], a[j] = a[j], a[i]
    return [v for _, v in a]


def _wrapped_coalesce(layout):
    cs, cd = coalesce(layout)
    return (list(cs) if isinstance(cs, tuple) else [cs],
            list(cd) if isinstance(cd, tuple) else [cd])


def _preprod(ls):
    pre = [1]
    for s in ls:
        pre.append(pre[-1] * s)
    return pre


def right_inverse(layout):
    ls, ld = _wrapped_coalesce(layout)
    pre = _preprod(ls)
    rs, rd, curr = [1], [0], 1
    for i in exchange_sort_order(ld):
        if ld[i] == curr:
            rs.append(ls[i])
            rd.append(pre[i])
            curr = ls[i] * ld[i]
    return coalesce((tuple(rs), tuple(rd)))


def left_inverse(layout):
    ls, ld = _wrapped_coalesce(layout)
    pre = _preprod(ls)
    order = exchange_sort_order(ld)
    rs, rd = [], [0]
    for i in order:
        d = ld[i]
        if d == 0:
            continue
        size = prod(tuple(rs)) if rs else 1
        if d % size != 0:
            raise RefError("Left inverse divisibility condition")
        rs.append(d // size)
        rd.append(pre[i])
    rs.append(ls[order[-1]])
    return coalesce((tuple(rs), tuple(rd)))


def cosize(layout):
    return sum((s - 1) * abs(d) for s, d in zip(flat(layout[0]), flat(layout[1]))) + 1


def logical_divide(layout, tiler):
    """logical_divide(Layout, Layout)."""
    rest = complement(tiler, coalesce(layout)[0])
    return composition(layout, ((tiler[0], rest[0]), (tiler[1], rest[1])))


def logical_product(block, tiler):
    """logical_product(Layout, Layout)."""
    rest = composition(complement(block, prod(block[0]) * cosize(tiler)), tiler)
    return ((block[0], rest[0]), (block[1], rest[1]))
