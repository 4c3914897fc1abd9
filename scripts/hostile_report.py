"""Count the hostile suite's outcomes: each case of tests/hostile/test_*.py's
`CASES`, run and sorted by what moye answered.

    python scripts/hostile_report.py                  # this tree's moye
    python scripts/hostile_report.py --moye OLD/moye  # another tree's moye (e.g. a
                                                      # `git worktree` of an older commit)

Outcomes: `expected` (exactly the case's MoyeError class, message matched), `other moye
error` (a MoyeError of another class or message), `raw exception` (not a
MoyeError), `no error` (it returned: a wrong or silent result), `hung` (past
the case's time limit).
"""
import argparse
import collections
import importlib
import json
import os
import re
import signal
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _outcome(case, moye_error, hung):
    def alarm(signum, frame):
        raise hung()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(case.seconds)
    try:
        case.run()
        return "no error", ""
    except hung:
        return "hung", f"over {case.seconds} s"
    except Exception as e:                      # noqa: BLE001  (sorting every outcome)
        text = f"{type(e).__name__}: {e}"[:300]
        if not isinstance(e, moye_error):
            return "raw exception", text
        if type(e) is case.error and re.search(case.match, str(e)):
            return "expected", text
        return "other moye error", text
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--moye", help="the moye package to run the cases against")
    parser.add_argument("--json", help="write every case's outcome here")
    args = parser.parse_args()
    # a folder where `moye` is the package under test and `tests` is this tree's
    top = tempfile.mkdtemp(prefix="hostile-")
    os.symlink(os.path.abspath(args.moye or os.path.join(ROOT, "moye")), os.path.join(top, "moye"))
    os.symlink(os.path.join(ROOT, "tests"), os.path.join(top, "tests"))
    sys.path.insert(0, top)
    import moye
    from tests.hostile.hostile import Hung
    files = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "tests", "hostile"))
                   if f.startswith("test_") and f.endswith(".py"))
    rows, counts = [], collections.OrderedDict()
    for name in files:
        try:
            module = importlib.import_module(f"tests.hostile.{name}")
        except Exception as e:                  # noqa: BLE001
            print(f"{name}: cannot import against this moye: {type(e).__name__}: {e}")
            continue
        for case in getattr(module, "CASES", ()):
            outcome, text = _outcome(case, moye.MoyeError, Hung)
            rows.append({"file": name, "case": case.name, "outcome": outcome, "raised": text})
            counts.setdefault(name, collections.Counter())[outcome] += 1
    kinds = ["expected", "other moye error", "raw exception", "no error", "hung"]
    print(f"{'file':<24}" + "".join(f"{k:>18}" for k in kinds) + f"{'total':>8}")
    total = collections.Counter()
    for name, c in counts.items():
        total.update(c)
        print(f"{name:<24}" + "".join(f"{c[k]:>18}" for k in kinds) + f"{sum(c.values()):>8}")
    print(f"{'all':<24}" + "".join(f"{total[k]:>18}" for k in kinds) + f"{sum(total.values()):>8}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"moye": os.path.abspath(args.moye or os.path.join(ROOT, "moye")),
                       "counts": dict(total), "cases": rows}, f, indent=1)


if __name__ == "__main__":
    main()
