"""The suite's own virtualenv, with the apps it drives (requirements.txt beside this file).

The apps run in their own processes from this virtualenv, so the product's stays as its
lock file says. It is made on first use and refreshed when the requirements change.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

REQUIREMENTS = Path(__file__).parent / "requirements.txt"
ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / "var" / "realapps-venv"


def ensure(venv: Path = VENV) -> Path:
    """The virtualenv's python, the pinned apps installed in it."""
    python = venv / "bin" / "python"
    stamp = venv / ".requirements-sha256"
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)], check=True
    )
    stamp.write_text(wanted)
    return python


if __name__ == "__main__":
    print(ensure())
