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
