"""Real servers the suites start and stop on loopback: PostgreSQL, NATS, HAProxy, an
S3-compatible server, Incus and a local cluster of gateways. Not part of the product."""
