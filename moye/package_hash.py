"""A hash of moye's own source files and the Python version, for the keys
of disk-cached kernels: any edit to moye changes them.

    >>> len(package_key())
    64
"""
import hashlib
import os
import sys

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_state = {}
_file_digests = {}              # path -> ((size, mtime_ns), digest)


def package_key():
    """A hash of moye's own source files (computed once per process) and the
    Python version: any edit to moye changes the disk cache's keys."""
    key = _state.get("package")
    if key is None:
        h = hashlib.sha256(sys.version.encode())
        inside = len(_PACKAGE) + 1          # a path's start before its place in the package
        for root, dirs, files in os.walk(_PACKAGE):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    h.update(path[inside:].encode() + b"\0")
                    h.update(file_digest(path) or b"?")
        key = _state["package"] = h.hexdigest()
    return key


def file_digest(path):
    """sha256 of a file's bytes (remembered while its size and mtime stay),
    or None where it cannot be read."""
    try:
        st = os.stat(path)
        stamp = (st.st_size, st.st_mtime_ns)
        hit = _file_digests.get(path)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).digest()
    except OSError:
        return None
    _file_digests[path] = (stamp, digest)
    return digest
