"""A small but real dashboard for the gateway's first workflow.

Organizations, users with roles, agents with versioned drafts, evaluation suites, runs with
per-scenario results, and reports, in its own SQLite file. Its backend is the gateway's
control plane, and `install_product_tools` registers its six operations as gateway tools.
"""

from examples.synthetic_app.web import AppConfig, SyntheticApp

__all__ = ["AppConfig", "SyntheticApp"]
