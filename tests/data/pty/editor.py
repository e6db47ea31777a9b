"""A scripted `$EDITOR` for the pty tests: `editor.py STATE_DIR FILE`.

STATE_DIR/rounds.json is a list of rounds; each round is a list of [old, new] text
replacements. The Nth call applies round N (a missing `old` exits 1, so the test notices).
Each call keeps copies: STATE_DIR/before-N.yaml and STATE_DIR/after-N.yaml.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> int:
    state, target = Path(sys.argv[1]), Path(sys.argv[2])
    counter = state / "count"
    number = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(number))
    rounds = json.loads((state / "rounds.json").read_text())
    text = target.read_text(encoding="utf-8")
    (state / f"before-{number}.yaml").write_text(text, encoding="utf-8")
    if number > len(rounds):
        sys.stderr.write(f"editor: no round {number}\n")
        return 1
    for old, new in rounds[number - 1]:
        if old not in text:
            sys.stderr.write(f"editor: {old!r} not in the file\n")
            return 1
        text = text.replace(old, new)
    target.write_text(text, encoding="utf-8")
    (state / f"after-{number}.yaml").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
