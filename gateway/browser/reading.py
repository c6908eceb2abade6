"""A snapshot of one of a task's pages, as the agent reads it.

Before the snapshot is built (`snapshot.py`), what the page must not show is taken out: the
values of its password fields and those the task typed as secrets, a signed-in task's
cookie and storage values (a trace of a task whose pages showed one keeps no screenshots),
and a frame the guard refused is marked so. Its refs become the ones the agent may use.
"""

from __future__ import annotations

from playwright.async_api import Locator, Page

from .calls import SNAPSHOT_TIMEOUT_MS
from .evidence import secret_values
from .policy import page_url_allowed
from .session_state import SessionState
from .snapshot import (
    Snapshot,
    build_snapshot,
    empty_frames,
    mark_refused_frames,
    mask_secrets,
    shows_field_value,
)

# A traced task keeps the values its pages' password fields held out of the trace: its
# snapshots look for them whenever an element shows text, not only a text box a value.
_TEXT_SHOWN = "]: "


async def take_snapshot(
    session: SessionState,
    page: Page,
    *,
    scope: Locator | None = None,
    depth: int | None = None,
    timeout_ms: float = SNAPSHOT_TIMEOUT_MS,
) -> Snapshot:
    """A snapshot of the page (or of one element, or to a depth)."""
    # A page still being parsed (a popup just opened) is read once its DOM is: else its
    # own DOMContentLoaded, a new document to the refs, would make this one stale.
    await session.parsed.wait(page, timeout_ms)
    document = session.document
    target = scope if scope is not None else page
    raw = await target.aria_snapshot(mode="ai", depth=depth, timeout=timeout_ms)
    if empty_frames(raw):
        refused = await session.frame_targets.refused(
            page, raw, lambda url: page_url_allowed(url, session.origins)
        )
        raw = mark_refused_frames(raw, refused)
    # A round trip to every frame of the page, only when it can change what is shown (or
    # what the trace keeps): most snapshots show no text box with a value.
    if shows_field_value(raw) or (session.trace and _TEXT_SHOWN in raw):
        held = await secret_values(page)
        session.held_secrets |= held
        raw = mask_secrets(raw, session.typed_secrets | held)
    for value in session.state_secrets:
        # Wherever the page shows one (a token printed in its text, a field's value);
        # then the trace's screenshots would show it too, so it keeps none.
        if value in raw:
            raw = raw.replace(value, "[secret]")
            session.visible_secrets = True
    session.snapshot_seq += 1
    # A navigation during the capture leaves the snapshot's refs stale from the start.
    snap = build_snapshot(
        raw,
        seq=session.snapshot_seq,
        document=document,
        max_chars=session.snapshot_max_chars,
        full=scope is None and depth is None,
    )
    session.refs.learn(snap)
    session.partial_map = not snap.full
    if snap.full:
        session.latest = snap
    return snap
