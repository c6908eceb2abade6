"""The wire to the guard process, both ends in one loop: messages in order, a socket with
the message it came with, questions answered, and an end that goes away told at once."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import pytest

from gateway.browser.guard_wire import MAX_MESSAGE, Message, Wire, WireClosed, pair


class End:
    """One end of a wire and what it was told."""

    def __init__(self, sock: socket.socket) -> None:
        self.messages: list[tuple[Message, list[int]]] = []
        self.closed = asyncio.Event()
        self.arrived = asyncio.Event()
        self.wire = Wire(sock, self._on_message, self.closed.set)

    def _on_message(self, message: Message, fds: list[int]) -> None:
        self.messages.append((message, fds))
        self.arrived.set()

    async def wait_for(self, count: int) -> None:
        async with asyncio.timeout(5):
            while len(self.messages) < count:
                self.arrived.clear()
                await self.arrived.wait()


@pytest.fixture
async def ends() -> Any:
    a, b = pair()
    left, right = End(a), End(b)
    yield left, right
    left.wire.close()
    right.wire.close()


async def test_messages_arrive_in_the_order_they_were_sent(ends: tuple[End, End]) -> None:
    left, right = ends
    for n in range(200):
        left.wire.send({"op": "n", "n": n})
    await right.wait_for(200)
    assert [m["n"] for m, _ in right.messages] == list(range(200))


async def test_a_socket_arrives_with_its_message_and_still_works(ends: tuple[End, End]) -> None:
    left, right = ends
    mine, theirs = socket.socketpair()
    left.wire.send({"op": "here", "what": "a stream"}, (theirs.fileno(),))
    theirs.close()  # the wire sent its own copy
    await right.wait_for(1)
    message, fds = right.messages[0]
    assert message == {"op": "here", "what": "a stream"} and len(fds) == 1
    received = socket.socket(fileno=fds[0])
    mine.sendall(b"ping")
    assert received.recv(4) == b"ping"
    received.close()
    mine.close()


async def test_a_question_gets_its_answer(ends: tuple[End, End]) -> None:
    left, right = ends

    async def answer_it() -> None:
        await right.wait_for(1)
        question, _ = right.messages[0]
        right.wire.answer(question, {"sum": question["a"] + question["b"]})

    answering = asyncio.ensure_future(answer_it())
    answer, fds = await left.wire.ask({"op": "add", "a": 2, "b": 3})
    await answering
    assert answer["sum"] == 5 and fds == []
    # An answer is not a message of its own: the handler never saw it.
    assert [m["op"] for m, _ in left.messages] == []


async def test_an_end_that_goes_away_is_told_and_its_questions_fail(
    ends: tuple[End, End],
) -> None:
    left, right = ends
    question = asyncio.ensure_future(left.wire.ask({"op": "never answered"}))
    await right.wait_for(1)
    right.wire.close()
    async with asyncio.timeout(5):
        await left.closed.wait()
    with pytest.raises(WireClosed):
        await question
    # A message sent after is dropped, not raised: what it asked for ended with the other side.
    left.wire.send({"op": "late"})
    with pytest.raises(WireClosed):
        await left.wire.ask({"op": "late"})


async def test_an_oversized_message_is_refused_and_nothing_is_sent(
    ends: tuple[End, End],
) -> None:
    left, right = ends
    with pytest.raises(ValueError, match="over"):
        left.wire.send({"op": "big", "blob": "x" * MAX_MESSAGE})
    left.wire.send({"op": "small"})
    await right.wait_for(1)
    assert [m["op"] for m, _ in right.messages] == ["small"]


async def test_a_packet_that_is_not_a_json_object_is_dropped() -> None:
    a, b = pair()
    reader = End(b)
    try:
        a.send(b"[1, 2]")
        a.send(b"not json")
        a.send(b'{"op": "fine"}')
        await reader.wait_for(1)
        assert [m["op"] for m, _ in reader.messages] == ["fine"]
    finally:
        a.close()
        reader.wire.close()
        for _, fds in reader.messages:
            for fd in fds:
                os.close(fd)
