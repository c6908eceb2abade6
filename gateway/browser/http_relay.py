"""HTTP/1.1 framing for the origin guard: reading a message head and relaying a body.

The guard (guard_proxy.py) decides whether a request may go out; this module only moves
bytes once it may, by the message's own framing (Content-Length or chunks, or to the end of
the connection when neither marks it), so that an upstream connection is reused only when
a response's end is known. Nothing here looks at origins.
"""

from __future__ import annotations

import asyncio
import contextlib

# The longest message head the guard reads (a request's, a response's): past it, 431.
MAX_HEAD_BYTES = 64 * 1024
# Bodies are relayed in reads of up to this much: a response's bytes cost one read and
# one write per chunk that the kernel hands over, not per line.
_CHUNK = 256 * 1024
# Headers of one hop only (RFC 9110, 7.6.1): never passed on by the guard.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "proxy-connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "upgrade",
    }
)


def partial(exc: BaseException) -> bool:
    """Whether the upstream had begun an answer before the connection failed."""
    return isinstance(exc, asyncio.IncompleteReadError) and bool(exc.partial)


def parse_head(head: bytes) -> tuple[str, dict[str, str], list[tuple[str, str]]]:
    """A head's first line, its headers by lowercased name, and the headers as sent
    (malformed lines dropped: they are neither read nor passed on)."""
    text = head.decode("latin-1")
    lines = text.split("\r\n")
    raw: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            continue
        raw.append((name, value.strip()))
    return lines[0], {n.lower(): v for n, v in raw}, raw


async def relay_body(
    headers: dict[str, str], reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter
) -> None:
    """Copy exactly the request's body (by Content-Length or chunked framing), no more."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        await relay_chunked(reader, up_writer)
        return
    await relay_exact(reader, up_writer, int(headers.get("content-length", "0") or "0"))


async def relay_chunked(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy one chunked body, trailers and its closing blank line included."""
    while True:
        size_line = await src.readuntil(b"\r\n")
        dst.write(size_line)
        size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            # Trailers, then the blank line that ends the body.
            while True:
                line = await src.readuntil(b"\r\n")
                dst.write(line)
                if line == b"\r\n":
                    return
        await relay_exact(src, dst, size + 2)


async def relay_exact(src: asyncio.StreamReader, dst: asyncio.StreamWriter, length: int) -> None:
    """Copy exactly `length` bytes; a connection that ends before is an error."""
    while length > 0:
        chunk = await src.read(min(length, _CHUNK))
        if not chunk:
            raise ConnectionError("the connection closed mid-body")
        dst.write(chunk)
        length -= len(chunk)
        await dst.drain()


async def relay_to_end(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy until the source closes: a body that no framing marks the end of."""
    while chunk := await src.read(_CHUNK):
        dst.write(chunk)
        await dst.drain()
    await dst.drain()


async def relay_response(
    method: str, head: bytes, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> bool:
    """Send the upstream's answer (its head `head` read already) back with `Connection:
    close`, then its body; returns whether the upstream connection can carry another
    request (the body's end was marked by its framing, and the upstream keeps it open)."""
    while True:
        status_line, headers, raw = parse_head(head)
        status = status_line.split(" ", 2)
        code = int(status[1]) if len(status) >= 2 and status[1].isdigit() else 0
        if 100 <= code < 200 and code != 101:
            writer.write(head)  # an interim answer (100 Continue, 103 Early Hints): as is
            head = await up_reader.readuntil(b"\r\n\r\n")
            continue
        break
    if not 200 <= code < 600:
        # A protocol switch or something that is not HTTP: its bytes as they come, to the end.
        writer.write(head)
        await relay_to_end(up_reader, writer)
        return False
    lines = [status_line]
    lines += [f"{n}: {v}" for n, v in raw if n.lower() not in HOP_BY_HOP]
    lines.append("Connection: close")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    keep = status[0] == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
    if method == "HEAD" or code in (204, 304):
        await writer.drain()
        return keep
    coding = headers.get("transfer-encoding", "").lower()
    lengths = {v.strip() for n, v in raw if n.lower() == "content-length"}
    if coding:
        if coding.rsplit(",", 1)[-1].strip() != "chunked":
            await relay_to_end(up_reader, writer)
            return False
        await relay_chunked(up_reader, writer)
    elif len(lengths) == 1 and (length := lengths.pop()).isdigit():
        await relay_exact(up_reader, writer, int(length))
    else:
        # No framing (or a contradictory one): the body ends when the upstream closes.
        await relay_to_end(up_reader, writer)
        return False
    await writer.drain()
    return keep


async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """One direction of a tunnel, half-closing the other side when the source ends."""
    try:
        while chunk := await src.read(_CHUNK):
            dst.write(chunk)
            await dst.drain()
    finally:
        with contextlib.suppress(Exception):
            dst.write_eof()


async def pipe_both(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    """Both directions of a tunnel until each has ended."""
    tasks = [
        asyncio.ensure_future(pipe(reader, up_writer)),
        asyncio.ensure_future(pipe(up_reader, writer)),
    ]
    try:
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        for task in tasks:
            task.cancel()
