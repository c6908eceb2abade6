"""A Wagtail site the suite drives: the project `wagtail start` generates, untouched, with
three published pages under its home page.

Wagtail's admin is a different kind of app from Django's: its page editor is a single
page of scripts (tabs, a dropdown of actions in the footer, a status side panel), its lists
have a menu per row, and documents are uploaded by a drop zone that sends the file at once.

`build(folder, python)` generates the project, migrates its SQLite database and seeds it.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

ADMIN_USER = "admin"
ADMIN_PASSWORD = "newsroom-admin-password-1"
PROJECT = "newsroom"
PAGES = ("Election night", "Harbour reopens", "Budget explained")

SEED = f"""
from django.contrib.auth.models import User
from home.models import HomePage

User.objects.create_superuser({ADMIN_USER!r}, "admin@newsroom.test", {ADMIN_PASSWORD!r})
home = HomePage.objects.get(depth=2)
for title in {list(PAGES)!r}:
    home.add_child(instance=HomePage(title=title)).save_revision().publish()
"""


def env(folder: Path) -> dict[str, str]:
    return {
        "DJANGO_SETTINGS_MODULE": f"{PROJECT}.settings.dev",
        "PYTHONPATH": str(folder),
        "PATH": "/usr/bin",
    }


def build(folder: Path, python: Path) -> Path:
    """Generate the project into `folder` (made empty), migrate and seed its database;
    return the path of its SQLite file."""
    folder.mkdir(parents=True, exist_ok=True)
    wagtail = python.parent / "wagtail"
    subprocess.run([str(wagtail), "start", PROJECT, str(folder)], check=True, capture_output=True)
    for args in (["migrate", "--verbosity", "0"], ["shell", "--command", textwrap.dedent(SEED)]):
        subprocess.run(
            [str(python), "manage.py", *args],
            cwd=folder,
            env=env(folder),
            check=True,
            capture_output=True,
        )
    return folder / "db.sqlite3"


def serve_command(python: Path, port: int) -> list[str]:
    return [str(python), "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]
