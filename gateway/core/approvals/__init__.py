"""Asking a person: when a call exceeds its task's grant, or the product requires it.

A task's control plane lists, at creation, what always needs a person (`required`) and
what a person may grant beyond the task's scopes (`grantable`, by the task's own user or by
the control plane only). A call to one of those becomes an approval request instead of
running or being denied; anything else outside the grant stays denied, with no prompt.
A person answers through a channel the agent cannot reach: the dashboard tab (an element
the shim owns), the control plane's endpoint, or the agent's client by MCP elicitation.

The task's policy is `policy.py` (captured with its identity, below the registry, so it
imports nothing of the gateway, and stands in the layer of the product's words while the
rest of the package stands above the store); `broker.py` stores, delivers and settles the
requests (each asked as one `question.py` `Question`; a request and its decision are
`request.py`, what a person reads of a call `summary.py`; its limits are `config.py`),
`waiting.py` is a call waiting for its outcome, `answering.py` whether an answer may settle
a request, `grants.py` what a person granted for the rest of a task; `channels.py` says
which channel may answer what, and `prompt.py` is the tool a product's agent asks with.
"""
