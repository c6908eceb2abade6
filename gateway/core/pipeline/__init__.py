"""The call pipeline: the one path every tool call takes, whichever door it came in by.

resolve -> authorize -> budget -> validate -> idempotency -> approval -> run under a
deadline -> bound the output -> persist evidence -> exactly one terminal `ToolResult`.

Authorization has three answers: the task's grant covers the call; it does not, and the
task's approval policy lets a person grant it (or the policy requires a person for this
tool), so the call waits for an approval (`gateway.core.approvals`); or it stays `denied`.

A catalog entry is never authority: the identity is authorized again on every call, and
the task's stored state (ended, expired) is read again too.

`steps` holds the pure checks (each raises a `ToolFailure`), `asking` the approval step,
`deadline` the handler's run under its deadline, `record` the call's record, `keys` the
idempotency keys' locks, and `runner` the `Pipeline` that runs them in order.
"""

from gateway.core.pipeline.runner import Pipeline
from gateway.core.pipeline.steps import MAX_INPUT_BYTES, bound_output

__all__ = ["MAX_INPUT_BYTES", "Pipeline", "bound_output"]
