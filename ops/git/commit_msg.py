"""Check a commit message against the project's form (CONTRIBUTING.md, "Commits").

A subject of at most 72 characters, `area: what changed` in the imperative, then a blank line
and a body with the why and the figures. Git's own messages (merges, reverts, fixup!/squash!)
pass as they are. Used by the `commit-msg` hook that `make hooks` installs; stdlib only, so that
it runs before the project is installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SUBJECT_MAX = 72
# `area: what changed`: the area is a lower-case name of up to three words (a folder, module or
# topic: `delta`, `stream/merging`, `key index`), several joined by commas when a change spans them
_AREA = r"[a-z0-9][a-z0-9_./-]*(?: [a-z0-9_./-]+){0,2}"
SUBJECT = re.compile(rf"^(?P<area>{_AREA}(?:, ?{_AREA})*): (?P<what>\S.*)$")
GIT_MADE = re.compile(r"^(Merge |Revert \"|fixup! |squash! |amend! )")
# words a subject in the past or progressive form starts with; the imperative is wanted
NOT_IMPERATIVE = frozenset(
    [
        "adds",
        "added",
        "adding",
        "fixes",
        "fixed",
        "fixing",
        "changes",
        "changed",
        "changing",
        "removes",
        "removed",
        "removing",
        "updates",
        "updated",
        "updating",
        "makes",
        "made",
        "making",
        "moves",
        "moved",
        "moving",
    ]
)


def lines_of(message: str) -> list[str]:
    """The message as git stores it: comment lines and trailing blank lines dropped."""
    kept = [line.rstrip() for line in message.splitlines() if not line.startswith("#")]
    while kept and not kept[-1]:
        kept.pop()
    while kept and not kept[0]:
        kept.pop(0)
    return kept


def problems(message: str) -> list[str]:
    """What is wrong with `message`, one line each (empty when it is fine)."""
    lines = lines_of(message)
    if not lines:
        return ["the message is empty"]
    subject = lines[0]
    if GIT_MADE.match(subject):
        return []
    found = []
    if len(subject) > SUBJECT_MAX:
        found.append(f"the subject is {len(subject)} characters; at most {SUBJECT_MAX}")
    match = SUBJECT.match(subject)
    if match is None:
        found.append(
            f"the subject {subject!r} is not `area: what changed` (a lower-case area, a colon, a space)"
        )
    else:
        what = match["what"]
        if what.split()[0].lower() in NOT_IMPERATIVE:
            found.append(
                f"the subject starts with {what.split()[0]!r}; say what the commit does: 'add', 'fix', 'keep'"
            )
        if what.endswith("."):
            found.append("the subject ends with a full stop")
    if len(lines) > 1 and lines[1]:
        found.append("the subject is followed by a line that is not blank; the body starts after one")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: commit_msg.py MESSAGE_FILE", file=sys.stderr)
        return 2
    found = problems(Path(argv[1]).read_text(encoding="utf-8"))
    for problem in found:
        print(f"commit message: {problem}", file=sys.stderr)
    if found:
        print(
            "(the form is in CONTRIBUTING.md, under Commits; git commit --no-verify skips the check)",
            file=sys.stderr,
        )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
