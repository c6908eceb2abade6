"""Running real gateways in tests, end-to-end suites and benchmarks.

- `test_settings(data_dir, **overrides)`: settings with fixed keys and nothing launched
  before it is used.
- `live_gateway(settings, ...)`: a gateway served on a free loopback port with a control
  plane client; on the way out it ends every task still live and fails if anything was
  left held for one (`Leaks`).
"""

from gateway.testing.leaks import Leaked, leaks
from gateway.testing.live import (
    LiveGateway,
    end_all_and_check_released,
    live_gateway,
    task_body,
)
from gateway.testing.settings import CONTROL_KEY, SECRET_KEYS, test_settings

__all__ = [
    "CONTROL_KEY",
    "SECRET_KEYS",
    "Leaked",
    "LiveGateway",
    "end_all_and_check_released",
    "leaks",
    "live_gateway",
    "task_body",
    "test_settings",
]
