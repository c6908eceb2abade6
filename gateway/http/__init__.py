"""The HTTP edge: Starlette routes that turn requests into calls on the core."""
