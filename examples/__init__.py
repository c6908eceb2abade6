"""Example host apps that ship with the gateway."""
