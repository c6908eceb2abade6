"""What the kernel holds an Incus sandbox's app to, read inside its container as root.

Standard library only (run by the gateway's interpreter with `-I -c`, as the container's
root, after the app is healthy). Everything comes from the kernel's side: the hard limits
in `/proc/<pid>/limits` of each process of the app's user (the app cannot raise them),
`statvfs` of `/data` and `/tmp`, the network interfaces there are. Nothing the app wrote is
read. Prints one JSON object.
"""

import json
import os
import sys

LIMITS = {
    "Max cpu time": "cpu_s",
    "Max file size": "file_size_bytes",
    "Max open files": "open_files",
    "Max core file size": "core_bytes",
}


def _limits(pid: str) -> dict[str, int | None]:
    found: dict[str, int | None] = {}
    with open(f"/proc/{pid}/limits") as fh:
        for line in fh.read().splitlines()[1:]:
            for label, name in LIMITS.items():
                if line.startswith(label):
                    hard = line[len(label) :].split()[1]
                    found[name] = None if hard == "unlimited" else int(hard)
    return found


def main() -> None:
    uid = int(sys.argv[1])
    apps: list[dict[str, int | None]] = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    apps.append(_limits(pid))
            except OSError:
                continue
    # The loosest of the app's processes is what holds it.
    rlimits: dict[str, int | None] = {}
    for name in LIMITS.values():
        values = [found.get(name) for found in apps]
        rlimits[name] = None if not values or None in values else max(v or 0 for v in values)
    sizes = {}
    for folder in ("/data", "/tmp"):  # noqa: S108 - the container's own
        info = os.statvfs(folder)
        sizes[folder] = info.f_blocks * info.f_frsize
    report = {
        "processes": len(apps),
        "rlimits": rlimits,
        "filesystems": sizes,
        "interfaces": sorted(os.listdir("/sys/class/net")),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
