"""A hash of moye's own source files and the Python version, for the keys
of disk-cached kernels: any edit to moye changes them.

A process reads the files and hashes them only where no earlier process
did for the same files as they stand: the key is kept in the disk cache's
folder (`package/`) under a hash of each file's path, size, mtime and
ctime (in nanoseconds) and inode, the stamps Python's own bytecode cache
trusts (it checks mtime and size alone). Stating moye's files takes about
2 ms where reading and hashing them takes 17 (2-core CI machine).

    >>> len(package_key())
    64
"""
import os
import re
import sys

from .compiler.disk import atomic_write, cache_directory

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_state = {}
_file_digests = {}              # path -> ((size, mtime, ctime, inode), digest)
_KEY = re.compile(rb"[0-9a-f]{64}")


def package_key():
    """A hash of moye's own source files (computed once per process, read
    from the disk cache where an earlier process hashed the same files) and
    the Python version: any edit to moye changes the disk cache's keys."""
    key = _state.get("package")
    if key is None:
        import hashlib      # on first use: loading OpenSSL costs `import moye` 5-10 ms
        files, stamps = [], []
        _scan(_PACKAGE, "", files, stamps)
        memo = os.path.join(cache_directory(), "package", hashlib.sha256(
            "\0".join([sys.version] + stamps).encode()).hexdigest())
        key = _read_key(memo)
        if key is None:
            key = _content_key(files)
            atomic_write(memo, key.encode())
        _state["package"] = key
    return key


def _scan(folder, prefix, files, stamps):
    """Append (path inside the package, path) of the .py files under
    `folder` to `files`, in a fixed order, and each one's stamp (path, size,
    mtime, ctime, inode) to `stamps`."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for e in entries:
        if e.name.endswith(".py") and e.is_file():
            files.append((prefix + e.name, e.path))
            stamps.append(f"{prefix}{e.name}:{_stamp(e.stat())}")
        elif e.is_dir() and e.name != "__pycache__":
            _scan(e.path, prefix + e.name + "/", files, stamps)


def _stamp(st):
    """What says a file is unchanged: its size, mtime, ctime and inode."""
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


def _content_key(files):
    """sha256 of the Python version and every file's path and bytes."""
    import hashlib
    h = hashlib.sha256(sys.version.encode())
    for rel, path in files:
        h.update(rel.encode() + b"\0")
        h.update(file_digest(path) or b"?")
    return h.hexdigest()


def _read_key(path):
    """The key a memo file holds, or None (missing, unreadable, damaged)."""
    try:
        with open(path, "rb") as f:
            data = f.read(65)
    except OSError:
        return None
    return data.decode() if _KEY.fullmatch(data) else None


def file_digest(path):
    """sha256 of a file's bytes (remembered while its size, mtime, ctime and
    inode stay), or None where it cannot be read."""
    try:
        stamp = _stamp(os.stat(path))
        hit = _file_digests.get(path)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        import hashlib
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).digest()
    except OSError:
        return None
    _file_digests[path] = (stamp, digest)
    return digest
