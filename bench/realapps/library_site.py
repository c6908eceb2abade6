"""A tiny Django project whose admin the suite drives: a library of books, authors, tags.

Everything a user meets in Django's admin is Django's own (its templates, its JavaScript:
the related-object popups, the date shortcuts, the select filters, the autocomplete, the
inline formsets, the delete confirmation); the project only declares models and registers
them. The sources are kept here as text and written into the run's work folder, since they
run in the suite's own virtualenv (with Django) and not in the product's.

`build(folder, python)` writes the project, migrates its SQLite database and seeds it.
"""

from __future__ import annotations

import sqlite3
import subprocess
import textwrap
from pathlib import Path

ADMIN_USER = "admin"
ADMIN_PASSWORD = "library-admin-password-1"

SETTINGS = """
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "only-for-a-loopback-bench-run"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "library",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "db.sqlite3"}}
USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
MEDIA_ROOT = BASE_DIR / "media"
MEDIA_URL = "media/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
"""

URLS = """
from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
"""

MODELS = """
from django.db import models


class Author(models.Model):
    name = models.CharField(max_length=100, unique=True)

    def __str__(self):
        return self.name


class Tag(models.Model):
    name = models.CharField(max_length=50, unique=True)

    def __str__(self):
        return self.name


class Book(models.Model):
    GENRES = [
        ("fiction", "Fiction"),
        ("science", "Science"),
        ("history", "History"),
        ("poetry", "Poetry"),
    ]
    title = models.CharField(max_length=200)
    author = models.ForeignKey(Author, on_delete=models.PROTECT, related_name="books")
    translator = models.ForeignKey(
        Author, on_delete=models.SET_NULL, null=True, blank=True, related_name="translations"
    )
    genre = models.CharField(max_length=20, choices=GENRES)
    published = models.DateField(null=True, blank=True)
    in_stock = models.BooleanField(default=True)
    cover = models.FileField(upload_to="covers/", blank=True)
    tags = models.ManyToManyField(Tag, blank=True)
    summary = models.TextField(blank=True)

    def __str__(self):
        return self.title


class Chapter(models.Model):
    book = models.ForeignKey(Book, on_delete=models.CASCADE, related_name="chapters")
    number = models.PositiveIntegerField()
    heading = models.CharField(max_length=200)

    def __str__(self):
        return self.heading
"""

ADMIN = """
from django.contrib import admin

from .models import Author, Book, Chapter, Tag


class ChapterInline(admin.StackedInline):
    model = Chapter
    extra = 0


@admin.register(Author)
class AuthorAdmin(admin.ModelAdmin):
    search_fields = ["name"]


@admin.register(Tag)
class TagAdmin(admin.ModelAdmin):
    search_fields = ["name"]


@admin.register(Book)
class BookAdmin(admin.ModelAdmin):
    list_display = ["title", "author", "genre", "in_stock"]
    list_filter = ["genre", "in_stock"]
    list_editable = ["in_stock"]
    search_fields = ["title"]
    autocomplete_fields = ["translator"]
    inlines = [ChapterInline]
"""

SEED = f"""
from django.contrib.auth.models import User
from library.models import Author, Book, Tag

User.objects.create_superuser({ADMIN_USER!r}, "admin@library.test", {ADMIN_PASSWORD!r})
User.objects.create_user("editor", "editor@library.test", "editor-password-1", is_staff=True)
authors = {{n: Author.objects.create(name=n) for n in [
    "Mary Shelley", "Carl Sagan", "Mary Beard", "Pablo Neruda", "Octavia Butler",
]}}
for name in ["classic", "award", "illustrated"]:
    Tag.objects.create(name=name)
books = [
    ("Frankenstein", "Mary Shelley", "fiction"),
    ("Cosmos", "Carl Sagan", "science"),
    ("SPQR", "Mary Beard", "history"),
    ("Twenty Love Poems", "Pablo Neruda", "poetry"),
    ("Kindred", "Octavia Butler", "fiction"),
    ("Pale Blue Dot", "Carl Sagan", "science"),
    ("Parable of the Sower", "Octavia Butler", "fiction"),
    ("Women and Power", "Mary Beard", "history"),
    ("Contact", "Carl Sagan", "fiction"),
    ("The Last Man", "Mary Shelley", "fiction"),
]
for title, author, genre in books:
    Book.objects.create(title=title, author=authors[author], genre=genre)
"""


def build(folder: Path, python: Path) -> Path:
    """Write the project into `folder`, migrate and seed its database; return the path of
    its SQLite file (what the suite's checks read)."""
    folder.mkdir(parents=True, exist_ok=True)
    app = folder / "library"
    app.mkdir(exist_ok=True)
    files = {
        folder / "settings.py": SETTINGS,
        folder / "urls.py": URLS,
        app / "__init__.py": "",
        app / "models.py": MODELS,
        app / "admin.py": ADMIN,
    }
    for path, source in files.items():
        path.write_text(textwrap.dedent(source).lstrip())
    (folder / "media").mkdir(exist_ok=True)
    database = folder / "db.sqlite3"
    database.unlink(missing_ok=True)
    env_args = ["-m", "django"]
    for command in (["makemigrations", "library"], ["migrate"]):
        _django(python, folder, [*env_args, *command, "--verbosity", "0"])
    _django(python, folder, [*env_args, "shell", "--command", textwrap.dedent(SEED)])
    # The admin's password hash as seeded, for the check of the password change.
    with sqlite3.connect(database) as conn:
        (initial,) = conn.execute(
            "select password from auth_user where username = ?", (ADMIN_USER,)
        ).fetchone()
    (folder / "initial-admin-password").write_text(initial)
    return database


def _django(python: Path, folder: Path, args: list[str]) -> None:
    subprocess.run(
        [str(python), *args],
        cwd=folder,
        env={"DJANGO_SETTINGS_MODULE": "settings", "PYTHONPATH": str(folder), "PATH": "/usr/bin"},
        check=True,
        capture_output=True,
    )


def serve_command(python: Path, port: int) -> list[str]:
    """The app served on loopback (Django's own server, which serves the admin's static
    files with DEBUG on), without its autoreloader."""
    return [str(python), "-m", "django", "runserver", f"127.0.0.1:{port}", "--noreload"]


def env(folder: Path) -> dict[str, str]:
    return {"DJANGO_SETTINGS_MODULE": "settings", "PYTHONPATH": str(folder), "PATH": "/usr/bin"}
