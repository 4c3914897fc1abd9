"""The module cache: hits from memory and disk without compiling, damaged
files ignored and rewritten, atomic writes, keys that see every input."""
import os

import pytest

import moye
from moye.backend.cuda import cache, nvrtc
from moye import package_hash

SRC = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = 2.0f; }'


pytestmark = pytest.mark.usefixtures("cache_dir")      # a private disk cache (conftest)


@pytest.fixture
def compiles(monkeypatch):
    """Counts the compilations NVRTC really does."""
    count = [0]
    real = nvrtc._compile

    def counted(*args):
        count[0] += 1
        return real(*args)
    monkeypatch.setattr(nvrtc, "_compile", counted)
    return count


def only_file(cache_dir):
    (path,) = [p for p in cache_dir.iterdir() if p.suffix == ".bin"]
    return path


def test_hits_from_memory_then_disk(cache_dir, compiles):
    first = nvrtc.compile_cuda(SRC, "k", "sm_80")
    assert compiles[0] == 1
    assert nvrtc.compile_cuda(SRC, "k", "sm_80") == first                  # memory
    cache.clear_memory()
    again = nvrtc.compile_cuda(SRC, "k", "sm_80")                          # disk
    assert again == first and compiles[0] == 1
    assert only_file(cache_dir).name == cache.key(
        SRC, "sm_80", nvrtc.standard_options("sm_80"), nvrtc.compiler_id(), repr(("k",)),
        "moye_kernel.cu", False) + ".bin"


def test_ptx_is_cached_too(compiles):
    first = nvrtc.compile_cuda(SRC, "k", "sm_80", ptx=True)
    cache.clear_memory()
    assert nvrtc.compile_cuda(SRC, "k", "sm_80", ptx=True).ptx == first.ptx
    assert compiles[0] == 1


@pytest.mark.parametrize("damage", ["truncated", "header only", "empty", "flipped byte",
                                    "wrong magic", "longer", "garbage"])
def test_a_damaged_file_is_recompiled_and_rewritten(cache_dir, compiles, damage):
    first = nvrtc.compile_cuda(SRC, "k", "sm_80")
    path = only_file(cache_dir)
    good = path.read_bytes()
    bad = {"truncated": good[:len(good) // 2],
           "header only": good[:51],
           "empty": b"",
           "flipped byte": good[:-10] + bytes([good[-10] ^ 1]) + good[-9:],
           "wrong magic": b"X" + good[1:],
           "longer": good + b"\0",
           "garbage": os.urandom(300)}[damage]
    path.write_bytes(bad)
    cache.clear_memory()
    assert nvrtc.compile_cuda(SRC, "k", "sm_80").cubin == first.cubin
    assert compiles[0] == 2
    assert path.read_bytes() == good                                       # rewritten


def test_a_valid_file_with_a_foreign_payload_is_recompiled(cache_dir, compiles):
    nvrtc.compile_cuda(SRC, "k", "sm_80")
    path = only_file(cache_dir)
    cache.put(path.stem, b"not a compiled module")
    cache.clear_memory()
    assert nvrtc.compile_cuda(SRC, "k", "sm_80").cubin[:4] == b"\x7fELF"
    assert compiles[0] == 2


def test_writes_are_atomic_and_leave_no_temporaries(cache_dir):
    cache.put("a" * 64, b"one")
    cache.put("a" * 64, b"two")
    assert sorted(p.name for p in cache_dir.iterdir()) == ["a" * 64 + ".bin"]
    cache.clear_memory()
    assert cache.get("a" * 64) == b"two"


def test_an_unwritable_cache_folder_only_costs_recompilation(tmp_path, monkeypatch, compiles):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("MOYE_CACHE_DIR", str(blocker / "cache"))
    assert nvrtc.compile_cuda(SRC, "k", "sm_80").cubin[:4] == b"\x7fELF"
    cache.clear_memory()
    nvrtc.compile_cuda(SRC, "k", "sm_80")
    assert compiles[0] == 2


def test_keys_see_every_input(monkeypatch):
    base = ("src", "sm_80", ("-O3",), "nvrtc-13.0")
    k = cache.key(*base)
    assert len(k) == 64
    assert cache.key(*base) == k
    for i, other in enumerate(["src2", "sm_90a", ("-O2",), "nvrtc-13.1"]):
        changed = list(base)
        changed[i] = other
        assert cache.key(*changed) != k
    assert cache.key(*base, "more") != k
    assert cache.key("ab", "c", (), "") != cache.key("a", "bc", (), "")     # no ambiguity
    monkeypatch.setitem(package_hash._state, "package", "another moye's source")
    assert cache.key(*base) != k                      # moye's own files are in the key


def _package_copy(tmp_path, monkeypatch):
    import shutil
    copy = tmp_path / "moye"
    shutil.copytree(os.path.dirname(moye.__file__), copy,
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(package_hash, "_PACKAGE", str(copy))
    monkeypatch.delitem(package_hash._state, "package", raising=False)
    return copy


def test_the_package_key_is_a_hash_of_moyes_files(tmp_path, monkeypatch):
    """Not the version string: an edit to any of moye's files changes it."""
    copy = _package_copy(tmp_path, monkeypatch)
    first = package_hash.package_key()
    assert package_hash.package_key() == first and len(first) == 64
    helper = copy / "layout" / "layout.py"
    helper.write_text(helper.read_text() + "\n# an edit\n")
    monkeypatch.delitem(package_hash._state, "package")
    assert package_hash.package_key() != first


def test_a_later_process_reads_the_package_key_without_hashing_the_files(tmp_path, monkeypatch,
                                                                          cache_dir):
    _package_copy(tmp_path, monkeypatch)
    first = package_hash.package_key()
    (memo,) = (cache_dir / "package").iterdir()
    assert memo.read_text() == first
    monkeypatch.delitem(package_hash._state, "package")        # as a new process starts
    monkeypatch.setattr(package_hash, "_content_key", lambda files: pytest.fail("hashed"))
    assert package_hash.package_key() == first


def test_a_damaged_package_memo_is_hashed_again(tmp_path, monkeypatch, cache_dir):
    _package_copy(tmp_path, monkeypatch)
    first = package_hash.package_key()
    for bad in (b"", b"z" * 64, first.encode()[:40]):
        (memo,) = (cache_dir / "package").iterdir()
        memo.write_bytes(bad)
        monkeypatch.delitem(package_hash._state, "package")
        assert package_hash.package_key() == first
        assert memo.read_text() == first                    # written again


def test_an_edit_that_keeps_size_and_mtime_still_changes_the_package_key(tmp_path, monkeypatch,
                                                                         cache_dir):
    copy = _package_copy(tmp_path, monkeypatch)
    first = package_hash.package_key()
    helper = copy / "layout" / "layout.py"
    st, text = helper.stat(), helper.read_text()
    helper.write_text(text[:-1] + ("#" if text[-1] != "#" else " "))    # same size
    os.utime(helper, ns=(st.st_atime_ns, st.st_mtime_ns))                 # same mtime
    assert helper.stat().st_size == st.st_size and helper.stat().st_mtime_ns == st.st_mtime_ns
    monkeypatch.delitem(package_hash._state, "package")
    assert package_hash.package_key() != first              # its ctime moved


def test_an_unwritable_cache_folder_still_gives_the_package_key(tmp_path, monkeypatch):
    _package_copy(tmp_path, monkeypatch)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("MOYE_CACHE_DIR", str(blocker))
    first = package_hash.package_key()
    monkeypatch.delitem(package_hash._state, "package")
    assert package_hash.package_key() == first and len(first) == 64


def test_clear_cache_removes_only_moye_files(cache_dir):
    nvrtc.compile_cuda(SRC, "k", "sm_80")
    (cache_dir / "notes.txt").write_text("mine")
    (cache_dir / ".tmp-abc.bin").write_bytes(b"left by a crash")
    cache.clear_cache()
    assert sorted(p.name for p in cache_dir.iterdir()) == ["notes.txt"]
    assert cache.get(cache.key(SRC, "sm_80", (), "")) is None


def test_default_folder(monkeypatch):
    monkeypatch.delenv("MOYE_CACHE_DIR")
    monkeypatch.setenv("HOME", "/somewhere")
    assert cache.directory() == "/somewhere/.cache/moye"


@moye.kernel
def twice(y, x):
    y[moye.thread_idx.x] = x[moye.thread_idx.x] * 2


def test_a_cached_cubin_the_driver_refuses_is_built_again(monkeypatch):
    """compile_specialization loads the cubin build_specialization gives;
    where the driver refuses one from the cache (checksum-valid, but not
    for this device), the specialization is traced and compiled again. A
    stand-in driver here: the cubin is only handed over, never run."""
    import numpy as np
    from moye.backend.cuda import backend, driver
    from moye.compiler.binder import bind_arguments
    loaded = []

    class Module:
        def __init__(self, cubin):
            if loaded and len(loaded) == 1:
                loaded.append("refused")
                raise moye.CudaError("cuModuleLoadData failed: CUDA_ERROR_INVALID_IMAGE")
            loaded.append(cubin)

        def get_function(self, name):
            return ("function", name)
    monkeypatch.setattr(driver, "load_module", Module)
    monkeypatch.setattr(driver, "device_arch", lambda: "sm_80")
    x = np.ones(32, np.float32)
    binding = bind_arguments(twice.signature, twice.constexpr_names, (x, x))
    spec = twice.specialization_text(binding, (32, 1, 1))
    traces = []

    def trace():
        traces.append(1)
        return twice._trace_binding(binding, (32, 1, 1))
    first = backend.CudaBackend().compile_specialization(spec, trace, (32, 1, 1))
    assert len(traces) == 1 and first.function == ("function", "moye_twice")
    assert "twice" in first.source and first.cubin[:4] == b"\x7fELF"
    cache.clear_memory()
    again = backend.CudaBackend().compile_specialization(spec, trace, (32, 1, 1))
    assert loaded[1] == "refused" and loaded[2] == first.cubin and len(traces) == 2
    assert again.cubin == first.cubin and again.source == first.source
    assert again.kernel.name == "twice"
