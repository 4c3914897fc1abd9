"""moye.autotune on the CPU backend: the chosen config (with an injected
timer, so the winner is known), the tuning file read by a fresh tuner and
by another process, MOYE_AUTOTUNE=0, retuning on a new key, the arrays
tuning overwrites, failing candidates, bad inputs and damaged files."""
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import moye
from moye import Config, MoyeError
from moye.compiler.autotune import measure

ROOT = str(Path(__file__).resolve().parents[2])


@moye.kernel
def scale(y, x, n, BLOCK: moye.Constexpr):
    i = moye.block_idx.x * BLOCK + moye.thread_idx.x
    if i < n:
        y[i] = 2.0 * x[i]


@moye.kernel
def accumulate(acc, x, n, BLOCK: moye.Constexpr):
    i = moye.block_idx.x * BLOCK + moye.thread_idx.x
    if i < n:
        acc[i] = acc[i] + x[i]


CONFIGS = [Config(BLOCK=32), Config(BLOCK=64), Config(BLOCK=128)]


class Timer:
    """An injected timer: runs the candidate once, says it took `ms[BLOCK]`
    milliseconds (or ms(config)), and records which configs it timed."""

    def __init__(self, ms):
        self.ms, self.timed = ms, []

    def __call__(self, run, config):
        run()
        self.timed.append(config)
        return self.ms(config) if callable(self.ms) else self.ms[config.BLOCK]


def launch(tuned, y, x, n):
    tuned[lambda c: (n + c.BLOCK - 1) // c.BLOCK, lambda c: c.BLOCK](y, x, n)


@pytest.fixture(autouse=True)
def private_cache(cache_dir, monkeypatch):
    """Every test tunes into its own cache folder, with tuning on."""
    monkeypatch.delenv("MOYE_AUTOTUNE", raising=False)
    return cache_dir


def tuning_files(cache_dir):
    folder = cache_dir / "autotune"
    return sorted(folder.glob("*.json")) if folder.exists() else []


# -- choosing ------------------------------------------------------------------------------

def test_the_fastest_config_runs_and_is_remembered(private_cache):
    timer = Timer({32: 3.0, 64: 1.0, 128: 2.0})
    tuned = moye.autotune(CONFIGS, key=["n"], timer=timer)(scale)
    x = np.arange(300, dtype=np.float32)
    y = np.full_like(x, np.nan)
    assert tuned.best_config(y, x, 300) is None                 # not tuned yet
    launch(tuned, y, x, 300)
    assert timer.timed == CONFIGS
    np.testing.assert_array_equal(y, 2 * x)
    assert tuned.best_config(y, x, 300) == Config(BLOCK=64)
    assert tuned.cache == {("cpu", (("int", 300),)): Config(BLOCK=64)}
    assert tuned.timings[("cpu", (("int", 300),))] == {Config(BLOCK=32): 3.0,
                                                      Config(BLOCK=64): 1.0,
                                                      Config(BLOCK=128): 2.0}
    launch(tuned, y, x, 300)                                    # the same key: no timing
    assert len(timer.timed) == 3
    [path] = tuning_files(private_cache)
    record = json.loads(path.read_text())["records"]
    assert [r["config"] for r in record.values()] == [1] and list(record)[0].startswith("cpu|")


def test_a_new_key_is_tuned_again(private_cache):
    timer = Timer(lambda c: c.BLOCK if n < 200 else 1000 - c.BLOCK)   # n: the loop's, below
    tuned = moye.autotune(CONFIGS, key=["x", "n"], timer=timer)(scale)
    for n in (100, 100, 300, 300):
        x = np.arange(n, dtype=np.float32)
        y = np.zeros_like(x)
        launch(tuned, y, x, n)
        np.testing.assert_array_equal(y, 2 * x)
    assert len(timer.timed) == 6                                # 100 once, 300 once
    x = np.arange(100, dtype=np.float32)
    assert tuned.best_config(np.zeros_like(x), x, 100) == Config(BLOCK=32)
    assert tuned.best_config(np.zeros(300, np.float32), np.ones(300, np.float32), 300) == \
        Config(BLOCK=128)
    xd = np.arange(100, dtype=np.float64)                      # another dtype: another key
    launch(tuned, np.zeros_like(xd), xd, 100)
    assert len(timer.timed) == 9
    assert sorted(parts for _, parts in tuned.cache)[0] == (((100,), "Float32"), ("int", 100))


def test_a_host_function_that_launches_kernels(private_cache):
    timer = Timer(lambda c: {16: 2.0, 32: 1.0}[c.threads])
    launched = []

    @moye.autotune(configs=[{"threads": 16}, {"threads": 32}], key=["x"], timer=timer)
    def double(x, threads, extra=0.0):
        launched.append(threads)
        y = np.empty_like(x)
        scale[x.size // threads, threads](y, x, x.size, threads)
        return y + extra

    x = np.arange(64, dtype=np.float32)
    np.testing.assert_array_equal(double(x, extra=1.0), 2 * x + 1)
    assert launched == [16, 32, 32]                           # each timed once, then the best
    np.testing.assert_array_equal(double(x), 2 * x)
    assert launched[3:] == [32] and double.best_config(x) == Config(threads=32)
    assert double.__name__ == "double"


def test_without_a_timer_it_measures_on_the_cpu(private_cache):
    tuned = moye.autotune(CONFIGS[:2], key=["n"], warmup=1, repeat=2)(scale)
    x = np.arange(64, dtype=np.float32)
    y = np.zeros_like(x)
    launch(tuned, y, x, 64)
    np.testing.assert_array_equal(y, 2 * x)
    [times] = tuned.timings.values()
    assert set(times) == set(CONFIGS[:2]) and all(t > 0 for t in times.values())
    assert tuned.best_config(y, x, 64) == min(times, key=times.get)
    assert measure(lambda: None, "cpu", warmup=0, repeat=3) >= 0


def test_prune_limits_the_candidates(private_cache):
    timer = Timer({32: 1.0, 64: 2.0, 128: 3.0})
    seen = []

    def prune(configs, n):
        seen.append(n)
        return [c for c in configs if c.BLOCK >= 64]

    tuned = moye.autotune(CONFIGS, key=["n"], prune=prune, timer=timer)(scale)
    x = np.arange(100, dtype=np.float32)
    launch(tuned, np.zeros_like(x), x, 100)
    assert seen == [100] and timer.timed == CONFIGS[1:]
    assert tuned.best_config(x, x, 100) == Config(BLOCK=64)


def test_concurrent_first_calls_tune_once(private_cache):
    timer = Timer(lambda c: c.tile)
    barrier = threading.Barrier(4)

    @moye.autotune(configs=[Config(tile=1), Config(tile=2)], key=["n"], timer=timer)
    def work(n, tile):
        return n * tile

    results = []

    def call():
        barrier.wait()
        results.append(work(5))
    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [5] * 4 and len(timer.timed) == 2


# -- the tuning file -----------------------------------------------------------------------

def test_a_fresh_tuner_reads_the_tuning_file(private_cache):
    first = Timer({32: 2.0, 64: 3.0, 128: 1.0})
    x = np.arange(200, dtype=np.float32)
    launch(moye.autotune(CONFIGS, key=["n"], timer=first)(scale), np.zeros_like(x), x, 200)
    again = Timer({32: 1.0, 64: 1.0, 128: 1.0})
    tuned = moye.autotune(CONFIGS, key=["n"], timer=again)(scale)
    assert tuned.best_config(x, x, 200) == Config(BLOCK=128)   # read, not timed
    y = np.zeros_like(x)
    launch(tuned, y, x, 200)
    assert again.timed == [] and len(first.timed) == 3
    np.testing.assert_array_equal(y, 2 * x)
    other = moye.autotune(CONFIGS[:2], key=["n"], timer=again)(scale)   # other configs
    launch(other, y, x, 200)
    assert len(again.timed) == 2 and len(tuning_files(private_cache)) == 2


PROGRAM = """
import sys
import numpy as np
import moye

@moye.kernel
def scale(y, x, n, BLOCK: moye.Constexpr):
    i = moye.block_idx.x * BLOCK + moye.thread_idx.x
    if i < n:
        y[i] = 2.0 * x[i]

timed = []
def timer(run, config):
    run()
    timed.append(config.BLOCK)
    return {32: 2.0, 64: 1.0}[config.BLOCK]

tuned = moye.autotune([moye.Config(BLOCK=32), moye.Config(BLOCK=64)], key=["n"],
                      timer=timer)(scale)
x = np.arange(100, dtype=np.float32)
y = np.zeros_like(x)
tuned[lambda c: (100 + c.BLOCK - 1) // c.BLOCK, lambda c: c.BLOCK](y, x, 100)
assert (y == 2 * x).all()
print("TIMED", timed, tuned.best_config(y, x, 100).BLOCK)
"""


def test_a_second_process_times_nothing(private_cache, tmp_path):
    program = tmp_path / "tuned_program.py"
    program.write_text(PROGRAM)
    env = dict(os.environ, MOYE_CACHE_DIR=str(private_cache),
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    env.pop("MOYE_AUTOTUNE", None)

    def run():
        done = subprocess.run([sys.executable, str(program)], env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return [line for line in done.stdout.splitlines() if line.startswith("TIMED")][-1]
    assert run() == "TIMED [32, 64] 64"
    assert run() == "TIMED [] 64"


def test_a_damaged_or_stale_tuning_file_is_ignored(private_cache):
    x = np.arange(100, dtype=np.float32)
    launch(moye.autotune(CONFIGS, key=["n"], timer=Timer({32: 1, 64: 2, 128: 3}))(scale),
           np.zeros_like(x), x, 100)
    [path] = tuning_files(private_cache)
    good = json.loads(path.read_text())
    [record_key] = good["records"]
    stale = dict(good, records={record_key: {"config": 2, "text": "(('BLOCK',('int',64)))"}})
    for damaged in ("{not json", b"\xff\xfe", json.dumps([1, 2]), json.dumps(stale),
                    json.dumps(dict(good, format="moye-autotune-0")),
                    json.dumps(dict(good, records={record_key: {"config": 7}}))):
        path.write_bytes(damaged.encode() if isinstance(damaged, str) else damaged)
        timer = Timer({32: 3, 64: 1, 128: 2})
        tuned = moye.autotune(CONFIGS, key=["n"], timer=timer)(scale)
        y = np.zeros_like(x)
        launch(tuned, y, x, 100)
        np.testing.assert_array_equal(y, 2 * x)
        assert len(timer.timed) == 3, damaged
        assert tuned.best_config(y, x, 100) == Config(BLOCK=64)
        assert json.loads(path.read_text())["records"][record_key]["config"] == 1   # rewritten
    path.unlink()
    path.mkdir()                                      # a folder where the file belongs
    timer = Timer({32: 3, 64: 1, 128: 2})
    launch(moye.autotune(CONFIGS, key=["n"], timer=timer)(scale), np.zeros_like(x), x, 100)
    assert len(timer.timed) == 3


# -- MOYE_AUTOTUNE=0 -----------------------------------------------------------------------

def test_tuning_off_uses_the_default_and_times_nothing(private_cache, monkeypatch):
    monkeypatch.setenv("MOYE_AUTOTUNE", "0")
    timer = Timer({32: 1.0, 64: 1.0, 128: 1.0})
    heuristic = moye.autotune(CONFIGS, key=["n"], timer=timer,
                              default=lambda n: {"BLOCK": 32 if n < 256 else 128})(scale)
    fixed = moye.autotune(CONFIGS, key=["n"], timer=timer, default=Config(BLOCK=64))(scale)
    first = moye.autotune(CONFIGS, key=["n"], timer=timer)(scale)
    for n, tuned, want in ((100, heuristic, 32), (300, heuristic, 128), (300, fixed, 64),
                           (300, first, 32)):
        x = np.arange(n, dtype=np.float32)
        y = np.zeros_like(x)
        launch(tuned, y, x, n)
        np.testing.assert_array_equal(y, 2 * x)
        assert tuned.best_config(y, x, n) == Config(BLOCK=want)
    assert timer.timed == [] and tuning_files(private_cache) == []
    monkeypatch.setenv("MOYE_AUTOTUNE", "1")
    x = np.arange(300, dtype=np.float32)
    launch(first, np.zeros_like(x), x, 300)
    assert len(timer.timed) == 3


# -- arguments that tuning overwrites ------------------------------------------------------

def test_restore_value_gives_each_candidate_the_callers_values(private_cache):
    x = np.arange(100, dtype=np.float32)
    start = np.full_like(x, 7.0)

    def timer(run, config):
        np.testing.assert_array_equal(acc, start)          # restored before each candidate
        run()
        run()
        return float(config.BLOCK)

    acc = start.copy()
    tuned = moye.autotune(CONFIGS, key=["n"], restore_value=["acc"], timer=timer)(accumulate)
    launch(tuned, acc, x, 100)
    np.testing.assert_array_equal(acc, start + x)          # the caller's call, once

    acc = start.copy()                                    # without it: every run accumulates
    launch(moye.autotune(CONFIGS, key=["x"], timer=Timer({32: 1, 64: 2, 128: 3}))(accumulate),
           acc, x, 100)
    np.testing.assert_array_equal(acc, start + 4 * x)


def test_reset_to_zero_zeroes_an_accumulator_before_each_run(private_cache):
    x = np.arange(100, dtype=np.float32)
    acc = np.zeros_like(x)
    seen = []

    def timer(run, config):
        acc[:] = np.nan                                   # poisoned: each run starts from zero
        run()
        seen.append(acc.copy())
        return float(config.BLOCK)

    tuned = moye.autotune(CONFIGS, key=["n"], reset_to_zero=["acc"], timer=timer)(accumulate)
    launch(tuned, acc, x, 100)
    np.testing.assert_array_equal(acc, x)
    assert all(np.array_equal(s, x) for s in seen) and len(seen) == 3


def test_restore_value_on_a_torch_tensor(private_cache):
    torch = pytest.importorskip("torch")
    x = torch.arange(64, dtype=torch.float32)
    acc = torch.ones(64)
    tuned = moye.autotune(CONFIGS, key=["x"], restore_value=["acc"],
                          timer=Timer({32: 1, 64: 2, 128: 3}))(accumulate)
    launch(tuned, acc, x, 64)
    assert torch.equal(acc, 1 + x)
    assert tuned.best_config(acc, x, 64) == Config(BLOCK=32)
    assert list(tuned.cache) == [("cpu", (((64,), "Float32"),))]


# -- failures ------------------------------------------------------------------------------

def test_a_failing_candidate_is_left_out(private_cache):
    configs = CONFIGS + [Config(BLOCK=2048)]              # more threads than a block has
    timer = Timer({32: 3.0, 64: 2.0, 128: 4.0, 2048: 0.5})
    tuned = moye.autotune(configs, key=["n"], timer=timer)(scale)
    x = np.arange(100, dtype=np.float32)
    y = np.zeros_like(x)
    launch(tuned, y, x, 100)
    np.testing.assert_array_equal(y, 2 * x)
    assert tuned.best_config(y, x, 100) == Config(BLOCK=64)
    [errors] = tuned.errors.values()
    assert list(errors) == [Config(BLOCK=2048)]
    assert isinstance(errors[Config(BLOCK=2048)], moye.LaunchError)


def test_when_every_candidate_fails_the_error_lists_them(private_cache):
    @moye.autotune(configs=[Config(tile=0), Config(tile=-1)], key=["n"],
                   timer=lambda run, c: run())
    def split(n, tile):
        if tile <= 0:
            raise ValueError(f"tile {tile} is not positive")
        return n // tile

    with pytest.raises(MoyeError) as e:
        split(8)
    text = str(e.value)
    assert "every config failed" in text and "split(n, tile)" in text
    assert "Config(tile=0): ValueError: tile 0 is not positive" in text
    assert "Config(tile=-1): ValueError: tile -1 is not positive" in text
    assert tuning_files(private_cache) == []


# -- bad inputs ----------------------------------------------------------------------------

def plain(x, n, tile=4):
    return x


def bad(configs=CONFIGS, fn=scale, **options):
    return moye.autotune(configs, **options)(fn)


@pytest.mark.parametrize("make, message", [
    (lambda: bad([]), "configs must be a non-empty list"),
    (lambda: bad(Config(BLOCK=32)), "configs must be a non-empty list"),
    (lambda: bad([Config(BLOCK=32), 64]), r"configs\[1\] must be a moye.Config"),
    (lambda: bad(key=["m"]), "key names 'm', which is not an argument of scale"),
    (lambda: bad(key="n"), r"key must be a list of argument names such as key=\['n'\]"),
    (lambda: bad(key=["BLOCK"]), "key names 'BLOCK', which the configs set"),
    (lambda: bad([Config(n=3)]), "config key 'n' is not a Constexpr parameter of scale"),
    (lambda: bad([Config(BLOCK=32, WARPS=4)]), "config key 'WARPS' is not a Constexpr"),
    (lambda: bad([Config(BLOCK=32), Config()]), "sets no 'BLOCK'"),
    (lambda: bad(fn=42), "decorates a @moye.kernel or a Python function"),
    (lambda: bad(fn=moye.func(plain)), "decorates a @moye.kernel or a Python function"),
    (lambda: bad(timer=1.0), "timer must be a function"),
    (lambda: bad(prune="all"), "prune must be a function"),
    (lambda: bad(default=[32]), "default must be a moye.Config"),
    (lambda: bad(default=Config(BLOCK=32, WARPS=4)), "sets 'WARPS', which no config"),
    (lambda: bad(warmup=-1), "warmup must be an int >= 0"),
    (lambda: bad(repeat=0), "repeat must be an int >= 1"),
    (lambda: bad(restore_value=["z"]), "restore_value names 'z'"),
    (lambda: bad(reset_to_zero="y"), "reset_to_zero must be a list"),
    (lambda: bad([{"tile": 2}, {"width": 3}], fn=plain), "'width' are not keyword parameters"),
    (lambda: bad([{"tile": 2}], fn=plain, key=["tile"]), "key names 'tile', which the configs"),
    (lambda: bad([{"tile": threading.Lock()}], fn=plain), "argument 'tile'.* cannot be keyed"),
])
def test_bad_settings_are_named(make, message):
    with pytest.raises(MoyeError, match=message):
        make()


def test_bad_calls_are_named(private_cache):
    tuned = bad(key=["n"], timer=Timer({32: 1, 64: 2, 128: 3}))
    x = np.zeros(8, np.float32)
    with pytest.raises(moye.LaunchError, match=r"launched with a grid and a block"):
        tuned(x, x, 8)
    with pytest.raises(moye.LaunchError, match=r"scale\[grid, block\]\(y, x, n\) takes 3"):
        tuned[1, 32](x, x, 8, 32)
    with pytest.raises(moye.LaunchError, match=r"no argument tile: its arguments are "
                                               r"\(y, x, n\)"):
        tuned[1, 32](x, x, n=8, tile=32)          # the tuner's, not the caller's
    with pytest.raises(moye.LaunchError, match=r"\[grid, block, cluster\]"):
        tuned[1](x, x, 8)
    function = bad([{"tile": 2}, {"tile": 4}], fn=plain, key=["n"])
    with pytest.raises(moye.LaunchError, match="'tile' set by moye.autotune's configs"):
        function(x, 8, tile=2)
    with pytest.raises(moye.LaunchError, match="'tile' set by moye.autotune's configs"):
        function(x, 8, 2)
    with pytest.raises(moye.LaunchError, match="the call gives no argument 'n'"):
        function(x)
    with pytest.raises(moye.MoyeTypeError, match="call it as plain"):
        function[1, 32]
    with pytest.raises(moye.MoyeTypeError, match="the timer returned 'fast'"):
        bad([{"tile": 2}], fn=plain, key=["n"], timer=lambda run, c: "fast")(x, 8)
    pruned = bad(key=["n"], prune=lambda configs, n: [Config(BLOCK=256)])
    with pytest.raises(MoyeError, match=r"prune returned Config\(BLOCK=256\), which is not in"):
        pruned[1, 32](x, x, 8)
    with pytest.raises(MoyeError, match="'x' \\(in restore_value\\) must be an array"):
        bad([{"tile": 2}], fn=plain, key=["n"], restore_value=["x"])(3.0, 8)


# -- on a GPU: CUDA events ------------------------------------------------------------------

@moye.kernel
def busy(y, x, n, REPS: moye.Constexpr, BLOCK: moye.Constexpr):
    i = moye.block_idx.x * BLOCK + moye.thread_idx.x
    if i < n:
        v = x[i]
        for _ in moye.range(REPS):
            v = v * 0.5 + 1.0
        y[i] = v


@pytest.mark.gpu
def test_on_a_gpu_events_time_the_work(torch, private_cache):
    n = 1 << 20
    configs = [Config(REPS=4096, BLOCK=128), Config(REPS=1, BLOCK=256),
               Config(REPS=1, BLOCK=64)]               # asks for too much shared memory
    tuned = moye.autotune(configs, key=["x", "n"], warmup=1, repeat=5)(busy)
    x = torch.randn(n, device="cuda")
    y = torch.full_like(x, float("nan"))
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):                         # timed on torch's current stream
        tuned[lambda c: n // c.BLOCK, lambda c: c.BLOCK](y, x, n,
                                                         smem=lambda c: (c.BLOCK == 64) << 20)
    stream.synchronize()
    assert torch.equal(y, x * 0.5 + 1.0)
    [times] = tuned.timings.values()
    assert set(times) == set(configs[:2]) and times[configs[1]] * 5 < times[configs[0]]
    [errors] = tuned.errors.values()
    assert list(errors) == [configs[2]] and isinstance(errors[configs[2]], moye.LaunchError)
    [path] = tuning_files(private_cache)
    [record_key] = json.loads(path.read_text())["records"]
    assert record_key.startswith(torch.cuda.get_device_name() + "|")
    again = moye.autotune(configs, key=["x", "n"], timer=Timer(lambda c: 0.0))(busy)
    assert again.best_config(y, x, n) == configs[1]

    @moye.autotune(configs=[{"reps": 2048}, {"reps": 1}], key=["x"], repeat=3)
    def host(x, reps):                                      # a host function: the current stream
        out = torch.empty_like(x)
        busy[n // 128, 128](out, x, x.numel(), reps, 128)
        return out
    assert torch.equal(host(x), x * 0.5 + 1.0) and host.best_config(x) == Config(reps=1)
    ms = measure(lambda: busy[n // 128, 128](y, x, n, 64, 128, stream=stream), "cuda", stream)
    assert 0 < ms < 100
