"""The `gateway` command: serve, demo, bridge call, keys new, db upgrade."""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from collections.abc import Sequence

from examples.synthetic_app.demo import add_command as add_demo_command
from gateway.bridge.commands import add_commands as add_bridge_commands
from gateway.core.tokens import new_key
from gateway.settings import Settings


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.app import build_app
    from gateway.serving import SERVER_OPTIONS

    settings = serve_settings(args)
    for note in settings.ensure_secrets():
        print(f"gateway: {note}", flush=True)
    print(
        f"gateway: serving on {settings.base_url} (data in {settings.data_dir.resolve()})",
        flush=True,
    )
    # The console signs in with the control key, whose file the notes above name.
    print(f"gateway: the operator console is at {settings.base_url}/console", flush=True)
    if settings.example:
        warning = example_warning(settings)
        if warning is not None:
            print(f"gateway: WARNING: {warning}", file=sys.stderr, flush=True)
        # The example dashboard and its sandbox instance run in this process, beside us.
        from examples.synthetic_app.serve import run as serve_with_example

        return serve_with_example(settings)
    app = build_app(settings)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level="info",
        **SERVER_OPTIONS,
    )
    return 0


def serve_settings(args: argparse.Namespace) -> Settings:
    """The settings `gateway serve` runs with: the environment's, then its flags. The
    example dashboard (a passwordless admin sign-in holding the control key) is served only
    when asked, by `--example` or `GATEWAY_EXAMPLE=true`."""
    overrides: dict[str, object] = {}
    if args.host is not None:
        overrides["host"] = args.host
    if args.port is not None:
        overrides["port"] = args.port
    if args.no_example:
        overrides["example"] = False
    elif args.example:
        overrides["example"] = True
    return Settings(**overrides)  # type: ignore[arg-type]


def example_warning(settings: Settings) -> str | None:
    """What to say when the example dashboard would be reachable beyond this machine."""
    if _loopback(settings.host):
        return None
    return (
        f"the example dashboard listens on {settings.host}, beyond this machine: anyone who "
        "reaches it signs in as its admin with no password, and it holds the control key. "
        "Serve it on 127.0.0.1 only."
    )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def _keys_new(_args: argparse.Namespace) -> int:
    print(new_key())
    return 0


def _db_upgrade(args: argparse.Namespace) -> int:
    from gateway.core.private_files import private_dir
    from gateway.core.store import migrate

    settings = Settings()
    if settings.database_url is None:
        private_dir(settings.data_dir)
    url = settings.resolved_database_url()
    before, after = migrate.upgrade(url, args.revision)
    shown = migrate.make_url(url).render_as_string(hide_password=True)
    if before == after:
        print(f"gateway: {shown} is at {after}, nothing to do")
    else:
        print(f"gateway: {shown} upgraded from {before or 'an empty database'} to {after}")
    return 0


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="gateway", description=__doc__)
    sub = root.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument("--host", default=os.environ.get("GATEWAY_HOST"))
    serve.add_argument("--port", type=int, default=None)
    example = serve.add_mutually_exclusive_group()
    example.add_argument(
        "--example",
        action="store_true",
        help="also serve the synthetic example dashboard (for trying the gateway on this "
        "machine: its sign-in asks no password)",
    )
    example.add_argument(
        "--no-example",
        action="store_true",
        help="do not serve it, even with GATEWAY_EXAMPLE=true (the default without either)",
    )
    serve.set_defaults(func=_serve)

    add_demo_command(sub)

    add_bridge_commands(sub)

    db = sub.add_parser("db", help="the store's schema")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    upgrade = db_sub.add_parser(
        "upgrade", help="migrate GATEWAY_DATABASE_URL (or the data dir's SQLite) to this release"
    )
    upgrade.add_argument("revision", nargs="?", default="head")
    upgrade.set_defaults(func=_db_upgrade)

    keys = sub.add_parser("keys", help="signing keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    keys_new = keys_sub.add_parser("new", help="print a fresh signing key")
    keys_new.set_defaults(func=_keys_new)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
