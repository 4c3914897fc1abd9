"""Compiled modules, in memory and on disk.

The disk cache lives under $MOYE_CACHE_DIR (default ~/.cache/moye): one
file per key, named ``<sha256>.bin``, holding a header then the payload::

    b"MOYECACHE1\\n" | payload length (8 bytes, little-endian) | sha256(payload) | payload

Writes are atomic: a temporary file in the same folder, then os.replace, so
a reader sees the old file, the new file or none, never half of one. A file
that is short, has another magic or fails its checksum (a crash on a
filesystem that reorders writes, a disk full, a hand edit) is ignored and
the caller compiles again; a folder that cannot be written only costs
recompilation. Nothing here raises on a bad cache.
"""
import hashlib
import os
import re
import tempfile

_MAGIC = b"MOYECACHE1\n"
_HEADER = len(_MAGIC) + 8 + 32
_NAME = re.compile(r"^[0-9a-f]{64}\.bin$")
_memory = {}


def directory():
    """The folder of the disk cache: $MOYE_CACHE_DIR, or ~/.cache/moye."""
    return os.environ.get("MOYE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                            "moye")


def key(source, arch, options, compiler_version, *more):
    """The cache key (hex sha256) of a compilation: its source, target
    architecture, options, the compiler's identity and moye's version."""
    from ... import __version__
    h = hashlib.sha256()
    for part in (source, arch, repr(tuple(options)), compiler_version, __version__) + more:
        data = part if isinstance(part, bytes) else str(part).encode()
        h.update(len(data).to_bytes(8, "little"))          # unambiguous concatenation
        h.update(data)
    return h.hexdigest()


def _path(k):
    return os.path.join(directory(), k + ".bin")


def get(k):
    """The payload stored under key `k`, or None (missing or damaged)."""
    hit = _memory.get(k)
    if hit is not None:
        return hit
    try:
        with open(_path(k), "rb") as f:
            data = f.read()
    except OSError:
        return None
    payload = _unwrap(data)
    if payload is not None:
        _memory[k] = payload
    return payload


def _unwrap(data):
    if len(data) < _HEADER or not data.startswith(_MAGIC):
        return None
    n = int.from_bytes(data[len(_MAGIC):len(_MAGIC) + 8], "little")
    digest = data[len(_MAGIC) + 8:_HEADER]
    payload = data[_HEADER:]
    if len(payload) != n or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


def put(k, payload):
    """Store `payload` (bytes) under key `k`, in memory and atomically on disk."""
    payload = bytes(payload)
    _memory[k] = payload
    d = directory()
    tmp = None
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".bin")
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + len(payload).to_bytes(8, "little")
                    + hashlib.sha256(payload).digest() + payload)
        os.replace(tmp, _path(k))
        tmp = None
    except OSError:
        pass                    # a read-only or full cache folder only costs recompilation
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def clear_memory():
    """Forget what this process compiled (the disk cache stays)."""
    _memory.clear()


def clear_cache(disk=True):
    """Empty the in-memory cache and, unless disk=False, delete moye's files
    (and stale temporaries) from the cache folder; other files there stay."""
    _memory.clear()
    if not disk:
        return
    d = directory()
    try:
        names = os.listdir(d)
    except OSError:
        return
    for name in names:
        if _NAME.match(name) or (name.startswith(".tmp-") and name.endswith(".bin")):
            try:
                os.unlink(os.path.join(d, name))
            except OSError:
                pass
