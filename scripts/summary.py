#!/usr/bin/env python3
"""The summary scripts/test.sh prints: read from what the runners wrote, never written by hand.

Arguments, one entry each, in the order to print:
  step|LABEL|STATUS            a command judged by its exit status: ok, FAILED ..., SKIPPED ...
  ran|LABEL|JUNIT|EXIT         a nextest tier that ran: its JUnit file and nextest's exit status
  notrun|LABEL|LIST|REASON     a nextest tier that could not run: `cargo nextest list
                               --message-format json` of what it would have run, and why not

Counts come from the JUnit files (a <testcase> with <failure> or <error> failed, with <skipped>
was skipped, else passed). A tier whose runner failed but whose file names no failure, or has no
file, is reported as failed: a runner's word is needed to call anything passed. The last line is
`N passed, N failed, N skipped`; the exit status is 1 if anything failed or a step did not pass.
"""

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def junit_counts(path):
    """(passed, failed names, skipped) of a JUnit file, or None if it cannot be read."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    passed, failed, skipped = 0, [], 0
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')} {case.get('name', '')}".strip()
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(name)
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


def listed(path):
    """The tests a `cargo nextest list --message-format json` output would run."""
    try:
        suites = json.loads(Path(path).read_text())["rust-suites"]
    except (OSError, ValueError, KeyError):
        return None
    names = []
    for binary_id, suite in suites.items():
        for name, case in suite.get("testcases", {}).items():
            if case.get("filter-match", {}).get("status") == "matches":
                names.append(f"{binary_id} {name}")
    return sorted(names)


def main(entries):
    total_passed = total_failed = total_skipped = 0
    bad = False
    print("\nSummary")
    for entry in entries:
        kind, label, *rest = entry.split("|")
        if kind == "step":
            status = rest[0]
            print(f"  {status.split()[0]:<8} {label}{status[len(status.split()[0]):]}")
            bad |= status.startswith("FAILED")
        elif kind == "ran":
            junit, code = rest[0], int(rest[1])
            counts = junit_counts(junit)
            if counts is None:
                print(f"  FAILED   {label}: nextest exited {code} and wrote no results ({junit})")
                total_failed += 1
                bad = True
                continue
            passed, failed, skipped = counts
            total_passed += passed
            total_failed += len(failed)
            total_skipped += skipped
            word = "ok" if code == 0 and not failed else "FAILED"
            print(f"  {word:<8} {label}: {passed} passed, {len(failed)} failed, {skipped} skipped")
            for name in failed:
                print(f"             failed: {name}")
            if code != 0 and not failed:
                print(f"             nextest exited {code} with no failed test in its results")
                total_failed += 1
            bad |= word == "FAILED"
        elif kind == "notrun":
            names, reason = listed(rest[0]), rest[1]
            if names is None:
                print(f"  FAILED   {label}: not run ({reason}), and its tests could not be listed")
                bad = True
                continue
            total_skipped += len(names)
            print(f"  SKIPPED  {label}: {len(names)} tests not run: {reason}")
            for name in names:
                print(f"             skipped: {name}")
        else:
            sys.exit(f"summary.py: unknown entry {entry!r}")
    print(f"{total_passed} passed, {total_failed} failed, {total_skipped} skipped")
    return 1 if bad or total_failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
