"""The build's guard against a lost execute_reply (_ext/reply_watch.py): a cell whose kernel went
idle without a reply fails fast, naming the cell, and an ordinary notebook runs as before."""

import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_ext"))
import reply_watch  # noqa: E402

reply_watch.install()


def notebook() -> nbformat.NotebookNode:
    return new_notebook(cells=[new_code_cell("x = 1"), new_code_cell("print('second cell', x + 1)")])


def test_a_notebook_runs_as_before():
    nb = notebook()
    NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    assert nb.cells[1].outputs[0]["text"] == "second cell 2\n"


def test_a_lost_reply_fails_fast_naming_the_cell(monkeypatch):
    """The reply to the second cell is dropped on arrival, as in the hang the module describes:
    the cell fails GRACE seconds after the kernel's idle status, not at the cell timeout."""
    monkeypatch.setattr(reply_watch, "GRACE", 2.0)
    client = NotebookClient(notebook(), timeout=600, kernel_name="python3")
    start_client = client.async_start_new_kernel_client

    async def start_and_lose_replies():
        kc = await start_client()
        recv = kc.shell_channel._recv
        cells = {"n": 0}

        async def lossy_recv(**kwargs):
            msg = await recv(**kwargs)
            if msg["header"]["msg_type"] == "execute_reply":
                cells["n"] += 1
                if cells["n"] == 2:
                    return {"parent_header": {}, "header": msg["header"], "content": {}}  # not this cell's
            return msg

        kc.shell_channel._recv = lossy_recv
        return kc

    client.async_start_new_kernel_client = start_and_lose_replies
    with pytest.raises(reply_watch.LostReplyError, match="print\\('second cell'"):
        client.execute()


def test_a_send_on_the_shell_channel_no_longer_swallows_a_replys_wake_up():
    """The hang's cause, reproduced without a kernel: a coroutine awaits a reply on an asyncio DEALER
    (nbclient waiting for execute_reply); the reply arrives while the client is busy with another
    message, and the client then sends on the same channel (nbclient's Output widget, a comm_msg)
    through Session.send's blocking shadow socket, which consumes the socket's edge-triggered wake-up.
    With `install`'s `_rearming_send` the waiting poll resolves at once, not at its timeout."""
    import asyncio
    import threading
    import time

    import zmq
    import zmq.asyncio
    from jupyter_client.channels import AsyncZMQSocketChannel
    from jupyter_client.session import Session

    async def wait_for_reply() -> float:
        context, plain = zmq.asyncio.Context(), zmq.Context()
        router = plain.socket(zmq.ROUTER)
        port = router.bind_to_random_port("tcp://127.0.0.1")
        dealer = context.socket(zmq.DEALER)
        dealer.connect(f"tcp://127.0.0.1:{port}")
        channel = AsyncZMQSocketChannel(dealer, Session())
        busy = asyncio.Event()
        loop = asyncio.get_running_loop()

        def kernel() -> None:
            ident, *_ = router.recv_multipart()  # the execute_request
            loop.call_soon_threadsafe(busy.set)  # something else wakes the client (a display_data)
            time.sleep(0.05)
            router.send_multipart([ident, b"execute_reply"])  # the reply, while the client is busy
            router.poll(2000)  # the comm_msg

        threading.Thread(target=kernel, daemon=True).start()
        await asyncio.sleep(0.1)
        dealer.send(b"execute_request")
        poll = asyncio.ensure_future(dealer.poll(5000))
        await busy.wait()
        time.sleep(0.2)  # the client handles that message; the reply lands meanwhile
        start = time.monotonic()
        channel.send(channel.session.msg("comm_msg", {}))  # nbclient's Output widget, on the shell channel
        assert await poll == zmq.POLLIN
        waited = time.monotonic() - start
        dealer.close(0), router.close(0), context.term(), plain.term()
        return waited

    assert asyncio.run(wait_for_reply()) < 1.0  # without the fix: the poll's whole timeout (5 s)
