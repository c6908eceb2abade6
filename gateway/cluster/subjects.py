"""The subjects nodes talk on over NATS, and what each node may publish and subscribe to.

Each node connects as a NATS user of its own, allowed only what a node does: receive its
own calls and errands, send calls and errands to the others, hear and tell the broadcasts,
and read replies in an inbox of its own. Another node's credentials then read none of a
node's routed calls or replies, and answer none of its requests (a reply goes only to a
request the replier received: NATS's `allow_responses`); a client with no credentials
connects to nothing. The NATS server's configuration is written from `permissions` (the
test harness's, `make cluster`'s and docs/deploy.md's copy alike).
"""

from __future__ import annotations

from typing import Any

CALLS = "gw.call.{node}"
ERRANDS = "gw.errand.{node}"
OWNER = "gw.owner"
ENDED = "gw.ended"
# Where a node's replies come: its own prefix, so that no other user may subscribe there.
INBOX = "gw.inbox.{node}"


def permissions(node_id: str) -> dict[str, Any]:
    """The NATS permissions of the user node `node_id` connects as."""
    return {
        "publish": {
            "allow": [CALLS.format(node="*"), ERRANDS.format(node="*"), OWNER, ENDED],
        },
        "subscribe": {
            "allow": [
                CALLS.format(node=node_id),
                ERRANDS.format(node=node_id),
                OWNER,
                ENDED,
                INBOX.format(node=node_id) + ".>",
            ],
        },
        # A node answers the calls and errands it received, and publishes to no inbox else.
        "allow_responses": True,
    }
