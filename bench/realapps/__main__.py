"""`python -m bench.realapps`: run the suite, print the table, keep the run's JSON."""

from __future__ import annotations

import argparse
import asyncio
import sys

from bench.realapps.suite import measure
from bench.report import write


def main() -> int:
    parser = argparse.ArgumentParser(description="The task browser on real apps.")
    parser.add_argument("--app", action="append", help="only this app (repeatable)")
    parser.add_argument("--task", action="append", help="only this task (repeatable)")
    parser.add_argument("--no-write", action="store_true", help="do not keep the run's JSON")
    args = parser.parse_args()
    rows, notes = asyncio.run(measure(args.app, args.task))
    print(f"{'task':<32} {'gateway':>16} {'peer':>16}  ratio")
    for row in rows:
        g = f"{'ok' if row['gateway completed'] else 'FAIL'} {row['gateway calls']}c"
        g += f" {row['gateway characters']}"
        p = f"{'ok' if row['peer completed'] else 'FAIL'} {row['peer calls']}c"
        p += f" {row['peer characters']}"
        print(f"{row['app'][:6]} {row['task']:<32} {g:>16} {p:>16}  {row['characters ratio']}")
    for key, value in notes.items():
        print(f"{key}: {value}")
    if not args.no_write:
        print(f"written to {write('realapps', rows, notes)}")
    return 0 if notes["met"] else 2


if __name__ == "__main__":
    sys.exit(main())
