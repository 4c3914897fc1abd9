"""`import moye` stays light: what only some programs use loads when they
first use it (how long the import takes is benchmarks/compile_time.py's
figure, not a test's). Its public names stay what they were."""
import json
import os
import subprocess
import sys
from pathlib import Path

import moye

ROOT = Path(moye.__file__).resolve().parents[1]

# modules that `import moye` leaves for later: each loads when first used
LATER = ["moye.ops", "moye.ops.functional", "moye.analysis", "moye.compiler.autotune",
         "moye.backend.cpu.interpreter", "moye.backend.cuda.codegen", "moye.backend.cuda.driver",
         "cuda.bindings.driver", "hashlib", "tempfile"]

# a program that imports moye, then uses what LATER holds
PROGRAM = '''\
import json
import sys

import numpy as np

import moye

later = json.loads(sys.argv[1])
print(json.dumps([m for m in later if m in sys.modules]))

from moye import ops                                # noqa: E402
from moye.compiler.hooks import HOOKS               # noqa: E402  (what the autotuner asks of CUDA)


@moye.kernel
def twice(y, x):
    i = moye.thread_idx.x
    y[i] = 2 * x[i]


assert ops.softmax(np.zeros((2, 4), np.float32)).tolist() == [[0.25] * 4] * 2
assert moye.ops.softmax is ops.softmax and callable(moye.analyze)
assert moye.Config(BLOCK=64).BLOCK == 64 and callable(moye.autotune)
assert HOOKS.driver().device_count() >= 0
x = np.arange(4, dtype=np.float32)
y = np.zeros_like(x)
twice[1, 4](y, x)                                   # on the CPU backend
assert y.tolist() == [0, 2, 4, 6], y
assert "2.0f" in twice.cuda_source(y, x, block=4)
from moye.compiler.disk import atomic_write         # noqa: E402  (what the caches write with)
atomic_write("cache/a.bin", b"1")
print(json.dumps([m for m in later if m in sys.modules]))
'''


def test_import_moye_leaves_for_later_what_loads_on_first_use(tmp_path):
    program = tmp_path / "program.py"               # a file: kernels need their source
    program.write_text(PROGRAM)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    run = subprocess.run([sys.executable, str(program), json.dumps(LATER)], cwd=tmp_path,
                         env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    at_import, at_the_end = map(json.loads, run.stdout.splitlines())
    assert at_import == [], f"`import moye` loads {at_import}"
    assert at_the_end == LATER


def test_the_public_names_are_kept():
    """`from moye import *` gives these names; update public_names.txt when
    the public API changes on purpose."""
    expected = Path(__file__).with_name("public_names.txt").read_text().split()
    assert sorted(moye.__all__) == expected
    namespace = {}
    exec("from moye import *", namespace)
    assert sorted(n for n in namespace if n != "__builtins__") == expected
