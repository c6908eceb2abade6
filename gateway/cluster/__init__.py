"""Several gateway processes as one: a task's live resources on one node (its owner, with an
epoch), calls routed to it over a message bus, revocations everywhere within a second, and
a dead node's tasks freed by the others (docs/deploy.md)."""
