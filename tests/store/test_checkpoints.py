"""SQLite's WAL is checkpointed off the call path: a commit never copies the WAL into the
database file (every gateway connection has `wal_autocheckpoint=0`), the store's own
checkpointer does, from its thread, without waiting for the lock a commit needs, and the
WAL it leaves behind does not grow with what was written."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.core.store import writer
from gateway.core.store.database import Store
from gateway.settings import Settings
from gateway.testing import test_settings
from gateway.testing.waiting import until
from tests.core_fixtures import started

BOUND_S = 60.0  # a wait that should end soon; only a broken gateway hits it
PAGE = 4096
SQLITE_OWN_THRESHOLD_PAGES = 1000  # where SQLite would checkpoint inside a commit


def rows(n: int, start: int) -> list[tuple[object, dict[str, object]]]:
    return [
        Store.evidence_row(
            record_id=f"evt_{start + i}",
            task_id="task_wal",
            org_id="org_a",
            kind="event",
            record={"filler": "x" * 2000, "n": start + i},
        )
        for i in range(n)
    ]


async def write(store: Store, batches: int, start: int = 0) -> int:
    for b in range(batches):
        batch = rows(64, start + b * 64)
        await asyncio.gather(*(store.commit([row]) for row in batch))
    return start + batches * 64


def checkpointed(store: Store, after: int) -> Callable[[], bool]:
    return lambda: store.checkpoints > after


def wal(settings: Settings) -> Path:
    return settings.data_dir / "gateway.db-wal"


@pytest.fixture
def quiet_checkpointer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpointer that waits an hour for its quiet moment: only the commits act."""
    monkeypatch.setattr(writer, "CHECKPOINT_QUIET_S", 3600.0)
    monkeypatch.setattr(writer, "CHECKPOINT_ROWS", 10**9)


@pytest.mark.usefixtures("quiet_checkpointer")
async def test_commits_leave_the_wal_to_the_checkpointer(tmp_path: Path) -> None:
    settings = test_settings(tmp_path / "data")
    async for gw in started(settings):
        await write(gw.store, 48)
        # Everything committed is still in the WAL: no commit copied it back, where
        # SQLite's own default would have at 1000 pages, inside the commit that crossed it.
        probe = sqlite3.connect(settings.data_dir / "gateway.db")
        try:
            _busy, frames, copied = probe.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        finally:
            probe.close()
        assert frames > 1.5 * SQLITE_OWN_THRESHOLD_PAGES
        assert copied == frames  # nothing of it needed a commit's help either
        assert gw.store.checkpoints == 0


async def test_the_checkpointer_never_waits_for_the_lock_a_commit_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "CHECKPOINT_QUIET_S", 0.05)
    settings = test_settings(tmp_path / "data")
    async for gw in started(settings):
        store = gw.store
        await write(store, 4)
        await until(checkpointed(store, 0), "the first checkpoint")
        before = store.checkpoints
        await write(store, 4, start=256)
        # Another connection holds the write lock, as a commit would: the checkpointer's
        # copy goes on all the same (the WAL is started over some other time), so it never
        # waits for a writer.
        holder = sqlite3.connect(settings.data_dir / "gateway.db", isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            await until(checkpointed(store, before), "a checkpoint beside the lock")
            holder.rollback()
        finally:
            holder.close()


async def test_the_wal_does_not_grow_with_what_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "CHECKPOINT_QUIET_S", 0.05)
    monkeypatch.setattr(writer, "CHECKPOINT_ROWS", 256)
    settings = test_settings(tmp_path / "data")
    async for gw in started(settings):
        store = gw.store
        # Commits without a pause, for longer than the checkpointer needs to copy the rows
        # it is told about: it copies while they come.
        written = await write(store, 80)
        size = wal(settings).stat().st_size
        # A WAL holding every commit is 2.5 times the rows' own bytes (26 MB for these,
        # measured with the WAL never started over); this one is used again and again.
        assert store.checkpoints > 0
        assert size < written * 2000, (size, written)


def count_sets(event: threading.Event) -> list[int]:
    """Count `event.set()` calls from now on (the waiting thread keeps the same event)."""
    count = [0]
    original = event.set

    def counted() -> None:
        count[0] += 1
        original()

    event.set = counted  # type: ignore[method-assign]
    return count


@pytest.mark.usefixtures("quiet_checkpointer")
async def test_a_burst_of_commits_wakes_the_checkpointer_once(tmp_path: Path) -> None:
    # Each wake of its thread takes the GIL from the event loop that serves the calls, for
    # a thread that only goes back to sleep until its quiet moment.
    settings = test_settings(tmp_path / "data")
    async for gw in started(settings):
        checkpointer = gw.store.opened.writer.checkpointer
        assert checkpointer is not None
        dirty, enough = count_sets(checkpointer._dirty), count_sets(checkpointer._enough)
        for start in range(100):
            await gw.store.commit(rows(1, start))
        assert dirty[0] <= 1  # the first commit of the burst, if none came before it
        assert enough == [0]
        assert gw.store.checkpoints == 0  # its quiet moment has not come
