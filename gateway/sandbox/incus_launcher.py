"""What starts an app inside an Incus container: run there by the gateway's interpreter.

Standard library only, and no import of the gateway: the container sees the interpreter
and its installation, not the gateway's package. The provider passes this file's source
with `-c`, the app's command and a JSON of what to set as arguments:

    python -I -c <this source> '<json>'   # {"limits": {...}, "socket": "/run/app/app.sock",
                                            #  "argv": [...]}

It sets the per-process resource limits (CPU seconds, file size, open files, no core
dumps), binds the app's listening unix socket and hands it over as standard input (the
same contract as the `local` provider: `SANDBOX_LISTEN_FD` 0), and replaces itself with the
app; what the kernel then holds is read by `incus_readback.py`, as root. It runs as the
app's user already: the container's init is not involved.
"""

import json
import os
import resource
import socket
import sys

MIB = 1024 * 1024


def main() -> None:
    plan = json.loads(sys.argv[1])
    limits = plan["limits"]
    rlimits = {
        "cpu_s": (resource.RLIMIT_CPU, 1, 1),
        "file_size_mb": (resource.RLIMIT_FSIZE, MIB, 0),
        "open_files": (resource.RLIMIT_NOFILE, 1, 0),
    }
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for name, (which, unit, grace) in rlimits.items():
        value = limits.get(name)
        if value is not None:
            # CPU: the soft limit sends SIGXCPU, the hard one a second later kills.
            resource.setrlimit(which, (value * unit, value * unit + grace))
    path = plan["socket"]
    if os.path.exists(path):
        os.unlink(path)  # the previous run's (a restart)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    os.dup2(listener.fileno(), 0)
    listener.close()
    os.chdir("/app")
    argv = plan["argv"]
    os.execv(argv[0], argv)  # noqa: S606 - the registered command, as an argv


if __name__ == "__main__":
    main()
