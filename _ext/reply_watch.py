"""nbclient's wait for a cell's reply, made unable to hang: the build and scripts/execute_chapter.py
install it before they execute a chapter (`install`).

Why. Executing chapter 9 at the cpu scale hung in about one build of three (jupyter-book 1.0.4,
nbclient 0.11, jupyter_client 8.10, pyzmq 27.3; ipykernel 6.31 and 7.4 alike), always at a cell that
draws an ipywidgets explorer (nbclient issue #312 reports the same). Logged message by message, the
kernel published the cell's ``status: idle`` on IOPub and then sat idle in its event loop, while the
client waited in ``shell_channel.get_msg(timeout=<the cell timeout>)`` for an ``execute_reply`` it
never saw: one wait of up to an hour at the cpu scale, for a reply the kernel sends before idle.

Two changes, both in the client, neither in what a cell computes:

- The shell socket is polled in slices of `SLICE` seconds instead of one wait as long as the cell
  timeout. Every new poll asks zmq for the socket's events first (level-triggered), so a reply
  whose wake-up was missed (zmq's descriptor is edge-triggered) is read within a slice.
- A cell whose kernel has gone idle (its IOPub status, which the kernel publishes after the reply)
  and whose reply has still not come `GRACE` seconds later fails at once, naming the cell, instead
  of waiting out the cell timeout: a lost reply is reported as one, never as a slow cell.
"""

from __future__ import annotations

import asyncio
import time
from queue import Empty
from typing import Any

SLICE = 1.0  # seconds per poll of the shell socket
GRACE = 60.0  # seconds between the kernel's idle status and a missing reply being an error


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
    AsyncZMQSocketChannel.get_msg = _sliced_get_msg
    NotebookClient._async_poll_for_reply = _watched_poll_for_reply(NotebookClient._async_poll_for_reply)
    NotebookClient._normlab_reply_watch = True
