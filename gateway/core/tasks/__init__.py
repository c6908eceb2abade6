"""Tasks: their life (`service`), their quota of concurrent tasks per owner (`quota`) and
the log of their lifecycle events (`log`); what the service is built from is `config`."""
