"""Compiled modules, in memory and on disk.

The disk cache lives under $MOYE_CACHE_DIR (default ~/.cache/moye): one
file per key, named ``<sha256>.bin``, holding a header then the payload::

    b"MOYECACHE1\\n" | payload length (8 bytes, little-endian) | sha256(payload) | payload

Writes are atomic: a temporary file in the same folder, then os.replace, so
a reader sees the old file, the new file or none, never half of one. A file
that is short, longer than its header says, has another magic or fails its
checksum (a crash on a filesystem that reorders writes, a disk full, a hand
edit) is ignored and the caller compiles again; so is an entry that is not a
regular file (a folder, or a FIFO: it is opened without blocking and never
read); a folder that cannot be written only costs recompilation. Nothing
here raises on a bad cache, or waits on one. A payload that passes the
checksum but is not what its reader expects is the reader's to refuse
(nvrtc._decode, CudaBackend's specialization payload).
"""
import hashlib
import os
import re
import stat

from ...compiler.disk import atomic_write
from ...compiler.disk import cache_directory as directory   # noqa: F401 (cache.directory())
from ...package_hash import package_key

_MAGIC = b"MOYECACHE1\n"
_HEADER = len(_MAGIC) + 8 + 32
_NAME = re.compile(r"^[0-9a-f]{64}\.bin$")
_memory = {}


def key(source, arch, options, compiler_version, *more):
    """The cache key (hex sha256) of a compilation: its source, target
    architecture, options, the compiler's identity and moye's own source
    (moye.package_hash.package_key: a hash of the package's files)."""
    h = hashlib.sha256()
    for part in (source, arch, repr(tuple(options)), compiler_version, package_key()) + more:
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
    payload = _read(_path(k))
    if payload is not None:
        _memory[k] = payload
    return payload


def _read(path):
    """The checked payload of the cache file at `path`, or None. Opened
    without blocking (a plain open of a FIFO waits for a writer forever),
    and read only if it is a regular file whose size is the one its header
    states."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size < _HEADER:
            return None
        head = os.read(fd, _HEADER)
        n = int.from_bytes(head[len(_MAGIC):len(_MAGIC) + 8], "little")
        if not head.startswith(_MAGIC) or st.st_size != _HEADER + n:
            return None
        chunks, left = [], n
        while left:
            chunk = os.read(fd, left)
            if not chunk:
                return None                 # shrunk while read
            chunks.append(chunk)
            left -= len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    payload = b"".join(chunks)
    if hashlib.sha256(payload).digest() != head[len(_MAGIC) + 8:]:
        return None
    return payload


def put(k, payload):
    """Store `payload` (bytes) under key `k`, in memory and atomically on disk."""
    payload = bytes(payload)
    _memory[k] = payload
    atomic_write(_path(k), _MAGIC + len(payload).to_bytes(8, "little")
                 + hashlib.sha256(payload).digest() + payload)   # unwritable: recompile


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
