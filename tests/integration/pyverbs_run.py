"""Runs rdma-core's own pyverbs tests (the `tests` directory python3-pyverbs ships,
unmodified) as their run_tests.py does, and writes each test's outcome as it ends, one JSON
object per line, for test_pyverbs.py:

    pyverbs_run.py TESTS_DIR RESULTS_JSONL [run_tests.py's arguments: --dev D --gid N ...]

A line {"start": ID} comes before each test's result, so that a run that dies (a crash in the
library under test) still says which test it was in. The process exits 0 whatever the tests'
outcomes: test_pyverbs.py judges them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import traceback
import unittest


class Recorder(unittest.TextTestResult):
    """unittest's verbose result, which also appends every outcome to a JSON-lines file."""

    out = None  # the open results file, set by main()

    def startTest(self, test):
        self._t0 = time.monotonic()
        self._write({"start": test.id()})
        super().startTest(test)

    def _write(self, obj: dict) -> None:
        self.out.write(json.dumps(obj) + "\n")
        self.out.flush()

    def _record(self, test, outcome: str, detail: str = "") -> None:
        elapsed = time.monotonic() - getattr(self, "_t0", time.monotonic())
        self._write({"id": test.id(), "outcome": outcome, "detail": detail,
                     "seconds": round(elapsed, 3)})

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failed", "".join(traceback.format_exception(*err)))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "error", "".join(traceback.format_exception(*err)))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "expected_failure", "".join(traceback.format_exception(*err)))

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "unexpected_success")


def main() -> int:
    tests_dir, results = sys.argv[1], sys.argv[2]
    sys.argv[1:] = sys.argv[3:]
    # As run_tests.py: the directory on the path (its modules import args_parser), the
    # package loaded under the name "tests", then the arguments parsed.
    sys.path.insert(0, tests_dir)
    from args_parser import parser  # noqa: E402 (rdma-core's)

    spec = importlib.util.spec_from_file_location(
        "tests", os.path.join(tests_dir, "__init__.py"), submodule_search_locations=[tests_dir])
    tests = importlib.util.module_from_spec(spec)
    sys.modules["tests"] = tests
    spec.loader.exec_module(tests)
    parser.parse_args()
    with open(results, "w", encoding="utf-8") as out:
        Recorder.out = out
        runner = unittest.TextTestRunner(resultclass=Recorder, verbosity=2)
        unittest.main(module=tests, testRunner=runner, exit=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
