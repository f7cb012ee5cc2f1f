"""daemon/'s rooms stand on floors (docs/ARCHITECTURE.md, "Layout and dependency direction"):
every include points to the room's own floor or a lower one, the two transports never
include each other, and the code that serves both (the CM service, the sessions' verbs, the
control server) names neither. Read from the tree's includes, so that a change that runs a
dependency back up fails here."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
DAEMON = REPO / "daemon"

# Bottom to top. Rooms on one floor may not include each other.
FLOORS = {
    "port": 1,
    "lcore": 2,
    "verbs": 3,
    "cm": 4,
    "roce": 5,
    "iwarp": 5,
    "control": 6,
    "telemetry": 6,
    "": 7,  # daemon/ itself: main.cc, the command line, the self-tests
}

# Files that serve both transports: they include neither, and say neither's name.
NEUTRAL = ["cm/service.cc", "cm/session.cc", "cm/ids.h", "verbs/session.cc",
           "verbs/session_qp.cc", "control/server.cc", "control/server.h"]

INCLUDE = re.compile(r'^#include "daemon/([a-z_/]+)\.h"', re.M)


def room_of(rel: str) -> str:
    return rel.split("/")[0] if "/" in rel else ""


def sources() -> list[Path]:
    return sorted(p for p in DAEMON.rglob("*") if p.suffix in (".h", ".cc"))


def test_every_file_of_daemon_is_in_a_room_of_a_floor():
    for p in sources():
        rel = p.relative_to(DAEMON).as_posix()
        assert room_of(rel) in FLOORS, f"daemon/{rel}: no floor for its room"


def test_includes_point_down_or_across_their_own_room():
    upward = []
    for p in sources():
        rel = p.relative_to(DAEMON).as_posix()
        mine = room_of(rel)
        for target in INCLUDE.findall(p.read_text()):
            theirs = room_of(target)
            assert (DAEMON / f"{target}.h").exists(), f"daemon/{rel} includes a missing daemon/{target}.h"
            if theirs == mine:
                continue
            if FLOORS[theirs] >= FLOORS[mine]:
                upward.append(f"daemon/{rel} ({mine or 'daemon'}, floor {FLOORS[mine]}) -> "
                              f"daemon/{target}.h ({theirs or 'daemon'}, floor {FLOORS[theirs]})")
    assert not upward, "includes that do not point down:\n" + "\n".join(upward)


def test_neutral_code_names_no_transport():
    named = []
    for rel in NEUTRAL:
        text = (DAEMON / rel).read_text()
        for n, line in enumerate(text.splitlines(), 1):
            if re.search(r"\b(iwarp|roce)", line, re.I):
                named.append(f"daemon/{rel}:{n}: {line.strip()}")
    assert not named, "transport names in neutral code:\n" + "\n".join(named)
