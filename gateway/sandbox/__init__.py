"""Sandboxes a task's app runs in: provisioned per task, bound to it, recorded, torn down.

A task whose `sandbox.provision` names a repository registered in the gateway's settings
and a commit gets its own copy of that app: a checkout of exactly that commit, started in
namespaces of its own with no network, served to the task's browser through its guard
proxy at an origin of its own, and torn down when the task ends (docs/sandbox.md).

| module | what it is for |
|---|---|
| `errors.py` | the failures, in the gateway's error tree |
| `provider.py` | the provider interface (`provision`, `health`, `teardown`) and its registry |
| `commit_tree.py` | a commit of a registered repository as git holds it: resolved, listed, read |
| `checkout.py` | that commit written out as plain files, and digested |
| `bubblewrap.py` | the jail's command line: namespaces, mounts, user, resource limits |
| `cgroup.py` | a cgroup v2 group per sandbox, where a delegated hierarchy exists |
| `local.py` | the `local` provider: bubblewrap on this machine |
| `local_sandbox.py` | one live sandbox of the `local` provider: its folder, user, jail |
| `local_folder.py` | a local sandbox's folder: laid out (checkout, sized data, socket), removed |
| `local_jail.py` | a local sandbox's jail started, and its init's pid read back |
| `proc_scan.py` | the sandboxes' processes, read from /proc, and ending them |
| `data_archive.py` | a kept data folder as a gzipped tar, read without following the app's links |
| `probe.py` | the app's health, asked over its unix socket, and the wait until it serves |
| `incus.py` | the `incus` provider: a container of its own per task |
| `incus_sandbox.py` | one sandbox of the `incus` provider, as a node holds it |
| `incus_binding.py` | what a container's config says of its task, so any node can take it over |
| `incus_app.py` | the app in its container: launched, watched, its limits read back |
| `incus_blanks.py` | the blank containers every Incus sandbox starts from, and their warm stock |
| `manifest.py` | the `sandbox-manifest/v1` record, built from a provider's handle |
| `service.py` | sandboxes per task: provisioned at creation, probed, torn down at the end |
| `extension.py` | `install(gw)` |

What a task asks for and what an operator registers are models of their own, below the
core (`gateway/core/sandbox_spec.py`: `gateway.core.identity` and the settings read
them); this package sits above the core, an adapter like the task browser.
"""
