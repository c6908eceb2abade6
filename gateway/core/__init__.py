"""The product's core: its words (results, errors, ids, origins), the task identity
and its tokens, the tool registry, the one call pipeline, evidence, approvals, tasks and
the store that keeps them. Nothing here knows a door, a browser or a sandbox."""
