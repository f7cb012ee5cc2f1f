"""The tree is formatted as .clang-format says (scripts/format.sh --check): a check that
fails, never a silent reformat."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


def test_every_cpp_file_is_clang_formatted():
    res = subprocess.run([str(REPO / "scripts" / "format.sh"), "--check"], capture_output=True,
                         text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, f"scripts/format.sh --check:\n{res.stdout}{res.stderr}"
