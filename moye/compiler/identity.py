"""Content hashes of what shapes a kernel's code, for its specialization key
and the disk cache key.

`content_key(value)` is a stable digest of a static value: numbers by their
exact bits (so 0.0 and -0.0, 1, 1.0 and True differ), strings, containers
element by element, NumPy arrays by dtype, shape and bytes, moye's layouts,
atoms and tiled copies by all that defines them, functions by
`function_key`, anything else that pickles by its pickle. What has no
content that can be read (a generator, a lock, an open file) raises a
MoyeError.

`function_key(fn)` is a digest of a function and everything it can run or
read: its code object (bytecode, constants with nested code, names, line
table), defaults, closure cells, and, transitively, every global its code
names (`co_names` of it and its nested code, looked up in its globals):
functions in any module, classes with their methods, user modules (their
file, plus the attributes the code names), plain values by content. moye's
own modules, the standard library and third-party packages are not walked:
`package_key()` (a hash of moye's files) covers moye, the Python version
and each package's version cover the others. A function with no readable
source (made by `exec`, typed at a prompt) is hashed by its code object
alone; recursion and cycles are cut by back-references.

The walk also lists what it read by name (`function_key_and_watch`): a
kernel whose global, or enclosing function's variable, is rebound later in
the process (`SCALE = 3.0` after a launch) sees it by identity (`changed`)
and is traced again. A container changed in place (a list's item set)
keeps its identity and is not seen.
"""
import builtins
import os
import pickle
import struct
import sys
import types

import numpy as np

from ..errors import MoyeTypeError
from ..package_hash import file_digest, package_key
from ..layout import ComposedLayout, Layout, Swizzle
from ..types import ElementType



def content_key(value, what="the value"):
    """A stable hex digest of `value`'s content; a MoyeError naming `what`
    where it has none that can be read.
        >>> content_key(0.0) == content_key(-0.0), content_key((1, 2)) == content_key((1, 2))
        (False, True)
    """
    h = _Hasher(strict=True, what=what)
    try:
        h.feed(value)
    except RecursionError:
        raise MoyeTypeError(f"{what}: a {type(value).__name__} nested too deeply to be keyed") \
            from None
    return h.hexdigest()


def function_key(fn):
    """A hex digest of `fn`'s code and, transitively, every function and
    global value it reads (see the module doc)."""
    return function_key_and_watch(fn)[0]


UNBOUND = object()          # a name a watched namespace does not hold (any more)


def function_key_and_watch(fn):
    """(function_key(fn), what to watch): the (namespace, name, object)
    of every global and user-module attribute the walk read (but library
    modules), so that a later rebinding of one is seen by identity alone
    (`changed`) without walking again."""
    h = _Hasher(strict=False, what=f"function {getattr(fn, '__qualname__', fn)!r}")
    try:
        h.feed(fn)
    except RecursionError:          # a call chain too deep to walk: this process only
        return f"unwalkable:{os.getpid()}:{id(fn)}", ()
    return h.hexdigest(), tuple(h.watch)


class _Cell:
    """A closure cell seen as a namespace of one name (what `changed` and
    the launch functions read: `space.get(name, default)`), so that a
    variable of the enclosing function rebound after the kernel was made is
    watched as a global is."""
    __slots__ = ("cell",)

    def __init__(self, cell):
        self.cell = cell

    def get(self, name, default=None):
        try:
            return self.cell.cell_contents
        except ValueError:                      # not filled yet
            return default


def changed(watch):
    """Whether a name of `watch` (function_key_and_watch) is bound to
    another object now: what the key was made of was rebound.
        >>> space = {"SCALE": 2.0}
        >>> watch = ((space, "SCALE", space["SCALE"]),)
        >>> changed(watch), space.update(SCALE=3.0), changed(watch)
        (False, None, True)
    """
    return any(space.get(name, UNBOUND) is not was for space, name, was in watch)


def _library(module_name):
    """Whether a module is covered without walking it: moye's own (by
    package_key), the standard library's and third-party packages' (by
    their versions)."""
    if not module_name or module_name == "__main__":    # the program's own (a script, a
        return False                                    # notebook, a doctest's globals)
    root = module_name.partition(".")[0]
    if root in ("moye", "builtins") or root in sys.stdlib_module_names:
        return True
    module = sys.modules.get(root)
    path = getattr(module, "__file__", None) or ""
    return "site-packages" in path or "dist-packages" in path


def _library_version(module_name):
    root = (module_name or "").partition(".")[0]
    if root == "moye":
        return package_key()
    return str(getattr(sys.modules.get(root), "__version__", ""))


def _names(code):
    """The names `code` and its nested code objects look up."""
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _names(c)
    return out


class _Hasher:
    """Feeds values into a sha256, each with a type tag and a length, so
    that different values never give the same stream."""

    def __init__(self, strict, what):
        import hashlib      # on first use: loading OpenSSL costs `import moye` 5-10 ms
        self.h = hashlib.sha256()
        self.strict, self.what = strict, what
        self.seen = {}                  # id -> index, for cycles and shared objects
        self.modules = {}               # id of a user module -> the attributes walked
        self.alive = []                 # keeps the seen objects' ids unique
        self.watch = []                 # (namespace, name, object) of each global read

    def hexdigest(self):
        return self.h.hexdigest()

    def put(self, tag, data=b""):
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogatepass")
        self.h.update(tag.encode() + b":" + len(data).to_bytes(8, "little") + data)

    def feed(self, v):
        t = type(v)
        if v is None or t is bool or t is int:
            return self.put(t.__name__, repr(v))
        if t is float:
            return self.put("float", struct.pack("<d", v))
        if t is str:
            return self.put("str", v)
        if t is bytes:
            return self.put("bytes", v)
        if t is complex:
            return self.put("complex", struct.pack("<dd", v.real, v.imag))
        if t is types.ModuleType:
            return self._module(v, set())
        if self._seen_before(v):
            return
        if t in (tuple, list):
            self.put(t.__name__, str(len(v)))
            for e in v:
                self.feed(e)
        elif t is dict:
            self.put("dict", str(len(v)))
            for k, e in v.items():
                self.feed(k)
                self.feed(e)
        elif t in (set, frozenset):         # element order differs between processes
            digests = sorted(self._sub(e) for e in v)
            self.put(t.__name__, b"".join(digests))
        elif isinstance(v, np.ndarray):
            self._array(v)
        elif isinstance(v, np.generic):
            self.put("np." + v.dtype.str, v.tobytes())
        elif isinstance(v, np.dtype):
            self.put("np.dtype", v.str)
        elif t is types.FunctionType:
            self._function(v)
        elif t is types.MethodType:
            self.put("method")
            self.feed(v.__func__)
            self.feed(v.__self__)
        elif t is types.CodeType:
            self._code(v)
        elif isinstance(v, type):
            self._class(v)
        elif t in (types.BuiltinFunctionType, types.BuiltinMethodType) or \
                t.__module__ == "builtins" and t.__name__ in ("method_descriptor",
                                                              "wrapper_descriptor"):
            self.put("builtin", f"{getattr(v, '__module__', '')}.{v.__qualname__}")
        elif t.__module__.startswith("moye.") or t.__module__ == "moye":
            self._moye_object(v)
        else:
            self._other(v)

    def _seen_before(self, v):
        """Whether `v` was fed already (then a back-reference is fed)."""
        i = self.seen.get(id(v))
        if i is not None:
            self.put("ref", str(i))
            return True
        self.seen[id(v)] = len(self.seen)
        self.alive.append(v)
        return False

    def _sub(self, v):
        h = _Hasher(self.strict, self.what)
        h.feed(v)
        return h.h.digest()

    def _array(self, a):
        if a.dtype.hasobject:
            self.put("ndarray-object", str(a.shape))
            for e in a.ravel(order="C"):
                self.feed(e)
            return
        self.put("ndarray", f"{a.dtype.str}{a.shape}")
        self.put("data", np.ascontiguousarray(a).tobytes())

    def _code(self, c):
        self.put("code", c.co_code)
        self.put("shape", repr((c.co_argcount, c.co_posonlyargcount, c.co_kwonlyargcount,
                                c.co_flags, c.co_name, c.co_varnames, c.co_freevars,
                                c.co_cellvars, c.co_names, c.co_firstlineno,
                                os.path.basename(c.co_filename))))
        self.put("lines", getattr(c, "co_linetable", b"") or b"")
        self.feed(c.co_consts)

    def _function(self, fn):
        module = fn.__module__
        if _library(module):
            return self.put("libfunction", f"{module}.{fn.__qualname__}:{_library_version(module)}")
        self.put("function", f"{module}.{fn.__qualname__}")
        self._code(fn.__code__)
        self.feed(fn.__defaults__)
        self.feed(fn.__kwdefaults__)
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            space = _Cell(cell)
            self._watch(space, name)
            contents = space.get(name, UNBOUND)
            if contents is UNBOUND:
                self.put("empty cell")          # a cell not filled yet
            else:
                self.feed(contents)
        names = _names(fn.__code__)
        g = fn.__globals__
        for name in sorted(names):
            if name in g:
                self._watch(g, name)
                self.put("global", name)
                self._global(g[name], names)
            elif not hasattr(builtins, name):
                self.put("unbound", name)       # a global defined later changes the key

    def _watch(self, space, name):
        """Watch `name` of `space` (a library module bound to it stays: a
        launch checks each watched name)."""
        v = space.get(name, UNBOUND)
        if type(v) is not types.ModuleType or not _library(v.__name__):
            self.watch.append((space, name, v))

    def _global(self, v, names):
        if type(v) is types.ModuleType:
            self._module(v, names)
        else:
            self.feed(v)

    def _module(self, m, names):
        """A library module by name and version; a user module by its file
        and the attributes the reading code names (each walked once)."""
        if _library(m.__name__):
            return self.put("libmodule", f"{m.__name__}:{_library_version(m.__name__)}")
        walked = self.modules.get(id(m))
        if walked is None:
            walked = self.modules[id(m)] = set()
            self.alive.append(m)
            path = getattr(m, "__file__", None)
            self.put("module", m.__name__)
            self.put("file", (file_digest(path) if path else None) or b"")
        else:
            self.put("module again", m.__name__)
        attributes = vars(m)
        for name in sorted(names - walked):
            if name in attributes:
                walked.add(name)
                self._watch(attributes, name)
                self.put("attribute", name)
                self._global(attributes[name], names)

    def _class(self, cls):
        module = cls.__module__
        if _library(module):
            return self.put("libclass", f"{module}.{cls.__qualname__}:{_library_version(module)}")
        self.put("class", f"{module}.{cls.__qualname__}")
        self.feed(tuple(b for b in cls.__bases__ if b is not object))
        for name, attr in sorted(vars(cls).items()):
            if name in ("__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"):
                continue
            self.put("attribute", name)
            if isinstance(attr, (staticmethod, classmethod)):
                attr = attr.__func__
            elif isinstance(attr, property):
                attr = (attr.fget, attr.fset, attr.fdel)
            self.feed(attr)

    def _moye_object(self, v):
        """moye's values by what defines them: layouts by their exact text,
        element types by name, others (atoms, ops, tiled copies and MMAs) by
        their public attributes."""
        t = type(v)
        if t in (Layout, Swizzle, ComposedLayout):
            return self.put(t.__name__, str(v))
        if t is ElementType:
            return self.put("ElementType", v.name)
        self.put("moye", f"{t.__module__}.{t.__qualname__}")
        try:
            fields = vars(v)
        except TypeError:
            fields = {s: getattr(v, s) for s in getattr(t, "__slots__", ()) if hasattr(v, s)}
        for k in sorted(fields):
            if not k.startswith("_"):
                self.put("field", k)
                self.feed(fields[k])

    def _other(self, v):
        """Anything else by its class and its pickle; where it has none, an
        error (strict) or its identity (the key then holds only in this
        process, so the disk cache never hands it another's kernel)."""
        try:
            data = pickle.dumps(v, protocol=4)
        except Exception:
            if self.strict:
                raise MoyeTypeError(f"{self.what}: a {type(v).__qualname__} cannot be keyed: moye "
                                "keys a static value by its content (numbers, strings, tuples, "
                                "lists, dicts, NumPy arrays, layouts, atoms, functions, objects "
                                "that pickle), and this one has none it can read") from None
            return self.put("identity", f"{type(v).__qualname__}:{os.getpid()}:{id(v)}")
        self._class(type(v))
        self.put("pickle", data)
