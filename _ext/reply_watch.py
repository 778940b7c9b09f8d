"""nbclient's wait for a cell's reply, made unable to hang: the build and scripts/execute_chapter.py
install it before they execute a chapter (`install`).

Why. Executing a chapter hung, always right after a cell that draws an ipywidgets explorer
(`widgets.interact`; nbclient issue #312). The kernel is not at fault: it sends the execute_reply and
goes idle, and the reply reaches the client's shell socket, where it sits unread. nbclient mimics
the Output widget that `interact` draws into, and when the cell's figure arrives on IOPub it sends a
``comm_msg`` (the widget's new outputs) on the shell channel while it is awaiting the cell's reply on
that same socket. jupyter_client's ``Session.send`` sends through a blocking *shadow* of the asyncio
socket, bypassing pyzmq's asyncio layer; if the reply arrived since the event loop last polled, that
send consumes the socket's edge-triggered ZMQ_FD signal, and pyzmq's waiting poll is never told. The
reply is then read only when the poll times out (the cell timeout: 600 s; never with none).

Found with py-spy and a log of every shell and IOPub message (issue 41): in 3 of 6 runs of chapter 4
alone, the reply was read exactly 600 s after the kernel stamped it; a stress notebook of 60 explorers
lost 15 of 300 wake-ups. The same belongs upstream, in jupyter_client's ``AsyncZMQSocketChannel.send``
(its PR #1059 discusses the shadow send). The chapters' explorers use ``interact_manual``, which runs
nothing until clicked and so sends no comm_msg: an unpatched client (nbconvert, papermill) cannot hit
the race there either.

Three changes, all in the client, none in what a cell computes:

- The fix: after every send on an asyncio channel, ask the asyncio socket for its EVENTS
  (`_rearming_send`); pyzmq's asyncio ``Socket.get(EVENTS)`` wakes a poll waiting on a message that
  the send's command processing let in (tests/test_reply_watch.py reproduces the lost wake-up).
- Guards kept from before the cause was known: the shell socket is polled in slices of `SLICE`
  seconds instead of one wait as long as the cell timeout, each new poll asking zmq for the socket's
  events first (level-triggered), so a wake-up missed for any other reason costs a slice at most;
  and a cell whose kernel has gone idle (its IOPub status, which the kernel publishes after the
  reply) and whose reply has still not come `GRACE` seconds later fails at once, naming the cell,
  instead of waiting out the cell timeout.
"""

from __future__ import annotations

import asyncio
import time
from queue import Empty
from typing import Any

import zmq

SLICE = 1.0  # seconds per poll of the shell socket
GRACE = 60.0  # seconds between the kernel's idle status and a missing reply being an error


def _rearming_send(original: Any) -> Any:
    def send(self: Any, msg: dict[str, Any]) -> None:
        original(self, msg)  # Session.send: a blocking shadow of the asyncio socket
        self.socket.get(zmq.EVENTS)  # re-arm any poll/recv waiting on this socket

    return send


class LostReplyError(RuntimeError):
    """The kernel finished a cell (its IOPub status went idle) but its execute_reply never came."""


async def _sliced_get_msg(self: Any, timeout: float | None = None) -> dict[str, Any]:
    """`AsyncZMQSocketChannel.get_msg`, with the wait cut into polls of at most `SLICE` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = SLICE if deadline is None else min(SLICE, max(0.0, deadline - time.monotonic()))
        if await self.socket.poll(int(left * 1000)):
            return await self._recv()
        if deadline is not None and time.monotonic() >= deadline:
            raise Empty


def _watched_poll_for_reply(original: Any) -> Any:
    async def poll_for_reply(self: Any, msg_id: str, cell: Any, timeout: Any, task_poll_output_msg: Any,
                             task_poll_kernel_alive: Any) -> dict[str, Any]:  # fmt: skip
        reply = asyncio.ensure_future(
            original(self, msg_id, cell, timeout, task_poll_output_msg, task_poll_kernel_alive)
        )
        idle_since = None
        while True:
            try:
                done, _ = await asyncio.wait({reply}, timeout=SLICE)
            except asyncio.CancelledError:  # nbclient cancels the wait when the kernel dies
                reply.cancel()
                raise
            if done:
                return reply.result()
            if not task_poll_output_msg.done():
                continue
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > GRACE:
                reply.cancel()
                task_poll_kernel_alive.cancel()
                first = (cell.source.strip().splitlines() or [""])[0][:100]
                raise LostReplyError(
                    f"the kernel finished this cell (its status went idle {GRACE:.0f} s ago) but its "
                    f"execute_reply never arrived; the cell begins {first!r} (see _ext/reply_watch.py)"
                )

    return poll_for_reply


def install() -> None:
    """Patch nbclient's client (once per process): sliced shell polls and the lost-reply check."""
    from jupyter_client.channels import AsyncZMQSocketChannel
    from nbclient.client import NotebookClient

    if getattr(NotebookClient, "_normlab_reply_watch", False):
        return
    AsyncZMQSocketChannel.send = _rearming_send(AsyncZMQSocketChannel.send)
    AsyncZMQSocketChannel.get_msg = _sliced_get_msg
    NotebookClient._async_poll_for_reply = _watched_poll_for_reply(NotebookClient._async_poll_for_reply)
    NotebookClient._normlab_reply_watch = True
