"""`python -m bench` (make bench): run every benchmark in turn, each in its own process, then
print one table of all their figures and draw the latency chart (bench/summary.py).

By default each area runs with fewer rounds so the whole run stays near a quarter of an hour
on a 2-core machine; `--full` runs every area with its own default rounds.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from bench.summary import ORDER

# The rounds `make bench` uses; each area's own defaults are its --full run.
QUICK = {
    "tabs": ["--rounds", "1000"],
    "webmcp": ["--quick"],
    "browser": ["--rounds", "6", "--tasks", "32"],
    "mcp": ["--rounds", "4"],
    "bridge": ["--rounds", "150", "--command-rounds", "6"],
    "cluster": ["--rounds", "100"],
    # The peer comparison keeps its own rounds: with fewer, its rows at 8 sessions are
    # within the run-to-run noise of each other.
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--full", action="store_true", help="every area with its default rounds")
    parser.add_argument("areas", nargs="*", help=f"only these areas, of {', '.join(ORDER)}")
    args = parser.parse_args()
    unknown = set(args.areas) - set(ORDER)
    if unknown:
        parser.error(f"unknown areas: {', '.join(sorted(unknown))}")
    here = Path(__file__).parent
    failed = []
    for area in args.areas or ORDER:
        if not (here / f"{area}.py").exists():
            continue
        print(f"\n== bench.{area} ==", flush=True)
        extra = [] if args.full else QUICK.get(area, [])
        # A nonzero exit is an area whose goal was not met or that broke; its JSON says which.
        if subprocess.run([sys.executable, "-m", f"bench.{area}", *extra], check=False).returncode:
            failed.append(area)

    from bench.summary import main as summarize

    summarize(ORDER)
    if failed:
        print(f"\nexited nonzero (goal not met, or broken): {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
