"""What a kernel's disk-cache key sees (compiler/identity.py): its callees and
the globals they read in any module, through helper modules written to a
temporary folder; and a stale-kernel test across two processes sharing a
disk cache, with a helper changed between them (compile-only with NVRTC
here; launched on the GPU in its gpu variant)."""
import importlib
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import moye
from moye.compiler import identity

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """write(name, text) writes a module into a folder on sys.path and
    imports it afresh."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    written = []

    def write(name, text):
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
        sys.modules.pop(name, None)
        written.append(name)
        importlib.invalidate_caches()
        return importlib.import_module(name)
    yield write
    for name in written:
        sys.modules.pop(name, None)


def test_a_changed_global_constant_in_another_module_changes_the_key(modules):
    consts = modules("id_consts", "SCALE = 3.0\n")
    user = modules("id_user", """
        import id_consts

        def f(x):
            return x * id_consts.SCALE
        """)
    first = identity.function_key(user.f)
    assert identity.function_key(user.f) == first
    consts.SCALE = 3.0000000000000004
    assert identity.function_key(user.f) != first
    consts.SCALE = 3.0
    assert identity.function_key(user.f) == first


def test_a_changed_nested_callee_in_a_third_module_changes_the_key(modules):
    modules("id_c", "def inner(x):\n    return x + 1\n")
    modules("id_b", "from id_c import inner\n\ndef middle(x):\n    return inner(x) * 2\n")
    top = modules("id_a", "import id_b\n\ndef top(x):\n    return id_b.middle(x)\n")
    first = identity.function_key(top.top)
    modules("id_c", "def inner(x):\n    return x + 2\n")          # only the third module
    importlib.reload(sys.modules["id_b"])                          # id_b.inner: the new one
    assert identity.function_key(top.top) != first


def test_functions_without_source_and_recursion_are_keyed():
    env = {}
    exec("def f(n):\n    return 1 if n == 0 else n * f(n - 1)\n", env)        # no file
    k = identity.function_key(env["f"])
    assert identity.function_key(env["f"]) == k
    other = {}
    exec("def f(n):\n    return 2 if n == 0 else n * f(n - 1)\n", other)
    assert identity.function_key(other["f"]) != k


def test_closures_and_defaults_are_in_the_key():
    def make(c, d=1):
        def f(x, y=d):
            return x * c + y
        return f
    assert identity.function_key(make(2)) == identity.function_key(make(2))
    assert identity.function_key(make(2)) != identity.function_key(make(3))
    assert identity.function_key(make(2)) != identity.function_key(make(2, 5))


def test_content_keys_are_exact():
    keys = [identity.content_key(v) for v in
            (1, 1.0, True, 0.0, -0.0, 0.1, 0.1000000000000001, "1", (1,), [1], {1: 2},
             np.float32(1), np.arange(2000), np.arange(2000) + (np.arange(2000) == 1234),
             np.arange(2000).astype(np.int32), np.arange(2000).reshape(40, 50))]
    assert len(set(keys)) == len(keys)
    assert identity.content_key({"a", "b", "c"}) == identity.content_key({"c", "b", "a"})
    assert identity.content_key(np.arange(5)) == identity.content_key(np.arange(5))


# -- two processes, one disk cache, a helper changed between them -----------------

KERNEL = """
import moye
import stale_helper


@moye.kernel
def scale_kernel(y, x):
    t = moye.thread_idx.x
    y[t] = stale_helper.scale(x[t])
"""

HELPER = "def scale(v):\n    return v * {factor}\n"

RUN = """
import json, sys
if sys.argv[1] == "gpu":
    import torch                # before moye initializes the driver (see tests/conftest.py)
import numpy as np
import stale_kernel
from moye.backend.cuda.backend import CudaBackend
from moye.compiler.binder import bind_arguments

k = stale_kernel.scale_kernel
block = (32, 1, 1)
out = {}
if sys.argv[1] == "gpu":
    x = torch.arange(1, 33, dtype=torch.float32, device="cuda")
    y = torch.full((32,), float("nan"), device="cuda")
    k[1, 32](y, x)
    torch.cuda.synchronize()
    out["y"] = y.cpu().tolist()
    out["traced"] = bool(k._traces)
else:
    x, y = np.ones(32, np.float32), np.zeros(32, np.float32)
    binding = bind_arguments(k.signature, k.constexpr_names, (y, x))
    traced = []

    def trace():
        traced.append(1)
        return k._trace_binding(binding, block)
    built = CudaBackend().build_specialization(k.specialization_text(binding, block), trace,
                                               block, "sm_90a")
    out.update(traced=bool(traced), source=built.source, elf=built.cubin[:4] == b"\\x7fELF")
print("RESULT" + json.dumps(out))
"""


def _run(folder, cache_dir, mode):
    env = dict(os.environ, MOYE_CACHE_DIR=str(cache_dir), PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join([str(folder), ROOT, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(folder / "run.py"), mode], env=env, cwd=folder,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


def _two_processes(tmp_path, mode):
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "stale_kernel.py").write_text(KERNEL)
    (folder / "run.py").write_text(RUN)
    helper = folder / "stale_helper.py"
    helper.write_text(HELPER.format(factor="3.0"))
    cache_dir = tmp_path / "cache"
    first = _run(folder, cache_dir, mode)
    again = _run(folder, cache_dir, mode)                 # unchanged: from the disk cache
    helper.write_text(HELPER.format(factor="5.25"))       # only the helper module changes
    changed = _run(folder, cache_dir, mode)
    return first, again, changed


def test_a_changed_helper_module_misses_the_disk_cache_in_another_process(tmp_path):
    pytest.importorskip("cuda.bindings")
    first, again, changed = _two_processes(tmp_path, "compile")
    assert first["traced"] and first["elf"] and "3.0f" in first["source"]
    assert not again["traced"] and again["source"] == first["source"]
    assert changed["traced"] and changed["elf"]
    assert "5.25f" in changed["source"] and "3.0f" not in changed["source"]


@pytest.mark.gpu
def test_a_changed_helper_module_runs_the_new_code_in_another_process(tmp_path, torch):
    first, again, changed = _two_processes(tmp_path, "gpu")
    x = np.arange(1, 33, dtype=np.float32)
    assert first["traced"] and not again["traced"] and changed["traced"]
    np.testing.assert_array_equal(np.array(first["y"], np.float32), x * np.float32(3.0))
    np.testing.assert_array_equal(np.array(again["y"], np.float32), x * np.float32(3.0))
    np.testing.assert_array_equal(np.array(changed["y"], np.float32), x * np.float32(5.25))
