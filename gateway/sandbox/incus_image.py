"""The image every Incus sandbox starts from, built here: no image server is needed.

The image is a skeleton. Its root holds the folders a container needs, links of a
merged-/usr system (`/bin`, `/lib`, `/lib64`, `/sbin` into `/usr`), the two users there are
(root, and `app`, uid `APP_UID`, that the app runs as), and an init that brings loopback up
(a container with no network card has only it, down until someone raises it) and then
waits. Programs come from the host's `/usr`, which the provider mounts read-only into
every container, and the gateway's interpreter from its installation, mounted the same way.
So the image is a few kilobytes, imported in milliseconds, and never out of date with the
host's programs.
"""

from __future__ import annotations

import io
import tarfile
import time

APP_UID = 1000
# Where the app's socket is made inside the container (a folder only the app may write).
RUN_DIR = "/run/app"

_INIT = b"""#!/bin/sh
# The container's init: loopback up, then wait until the container is stopped.
if [ -x /usr/sbin/ip ]; then /usr/sbin/ip link set lo up; fi
exec /usr/bin/sleep infinity
"""
_PASSWD = f"root:x:0:0::/:/nonexistent\napp:x:{APP_UID}:{APP_UID}::/data:/nonexistent\n"
_GROUP = f"root:x:0:\napp:x:{APP_UID}:\n"


def build(description: str = "gateway sandbox") -> bytes:
    """The image as the unified tarball `POST /1.0/images` takes (metadata and rootfs)."""
    buffer = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:

        def add(
            name: str,
            *,
            kind: bytes = tarfile.DIRTYPE,
            mode: int = 0o755,
            owner: int = 0,
            data: bytes | None = None,
            link: str = "",
        ) -> None:
            member = tarfile.TarInfo(name)
            member.type, member.mode, member.mtime = kind, mode, now
            member.uid = member.gid = owner
            member.linkname = link
            if data is None:
                tar.addfile(member)
            else:
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))

        metadata = (
            f"architecture: x86_64\ncreation_date: {now}\n"
            f"properties:\n  description: {description}\n"
        )
        add("metadata.yaml", kind=tarfile.REGTYPE, mode=0o644, data=metadata.encode())
        add("rootfs")
        for folder in ("usr", "proc", "sys", "dev", "etc", "app", "run", "root", "var"):
            add(f"rootfs/{folder}")
        add("rootfs/data", mode=0o700, owner=APP_UID)
        add("rootfs/tmp", mode=0o1777)
        add(f"rootfs{RUN_DIR}", mode=0o700, owner=APP_UID)
        for top in ("bin", "lib", "lib64", "sbin"):
            add(f"rootfs/{top}", kind=tarfile.SYMTYPE, mode=0o777, link=f"usr/{top}")
        add("rootfs/etc/passwd", kind=tarfile.REGTYPE, mode=0o644, data=_PASSWD.encode())
        add("rootfs/etc/group", kind=tarfile.REGTYPE, mode=0o644, data=_GROUP.encode())
        add("rootfs/init", kind=tarfile.REGTYPE, mode=0o755, data=_INIT)
    return buffer.getvalue()
