"""`python -m bench` (make bench): run every benchmark in turn, each in its own process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ORDER = ["core", "tabs", "browser", "mcp", "bridge", "example"]


def main() -> int:
    here = Path(__file__).parent
    failed = []
    for area in ORDER:
        if not (here / f"{area}.py").exists():
            continue
        print(f"\n== bench.{area} ==", flush=True)
        if subprocess.run([sys.executable, "-m", f"bench.{area}"], check=False).returncode:
            failed.append(area)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
