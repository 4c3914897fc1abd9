"""The folder of moye's caches (compiled kernels, tunings, the package
key), and files they write whole or not at all."""
import os


def cache_directory():
    """The folder of the disk caches: $MOYE_CACHE_DIR, or ~/.cache/moye.
        >>> import os; os.path.isabs(cache_directory())
        True
    """
    return os.environ.get("MOYE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                            "moye")


def atomic_write(path, data):
    """Write `data` (bytes) to `path` whole: a temporary file in the same
    folder, then os.replace, so that a reader never sees a part of it. A
    folder that cannot be written (read-only, full) writes nothing: a
    cache only loses what it would have kept.
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "a", "b.json")
        >>> atomic_write(path, b"{}"); open(path, "rb").read()
        b'{}'
    """
    import tempfile         # on first write: its imports cost `import moye` about 10 ms
    folder = os.path.dirname(path)
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-",
                                   suffix=os.path.splitext(path)[1])
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
