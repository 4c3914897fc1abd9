"""Compiled modules, in memory and on disk.

On disk under $MOYE_CACHE_DIR (default ~/.cache/moye), one file per key:
a checksum header then the cubin. Writes are atomic (a temporary file in
the same folder, then os.replace); a damaged file is ignored and rebuilt.
"""
import hashlib
import os
import tempfile

_memory = {}
_MAGIC = b"MOYE1"


def directory():
    return os.environ.get("MOYE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                            "moye")


def key(source, arch, options, compiler_version):
    from ... import __version__
    h = hashlib.sha256()
    for part in (source, arch, repr(options), compiler_version, __version__):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def get(k):
    hit = _memory.get(k)
    if hit is not None:
        return hit
    path = os.path.join(directory(), k + ".cubin")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    head, digest, body = data[:5], data[5:37], data[37:]
    if head != _MAGIC or hashlib.sha256(body).digest() != digest:
        return None
    _memory[k] = body
    return body


def put(k, blob):
    _memory[k] = blob
    d = directory()
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + hashlib.sha256(blob).digest() + blob)
        os.replace(tmp, os.path.join(d, k + ".cubin"))
    except OSError:
        pass          # a read-only cache folder only costs recompilation


def clear():
    _memory.clear()
