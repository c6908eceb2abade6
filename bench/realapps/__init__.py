"""The task browser on real apps: what a user asks of open-source web apps, done through
the gateway and through Playwright MCP by the same scripted agent, each effect checked in
the app's own database.

Run: `python -m bench.realapps` (`--task NAME` for some tasks only; "sign in" always runs).
"""
