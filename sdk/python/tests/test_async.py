"""The asyncio API against the real `airlock rpc`."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, Coroutine

import pytest

import airlock
from airlock import aio


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 120))


def test_async_everything(tmp_path: Path) -> None:
    async def main() -> None:
        async with aio.Sandbox.create(resources={"memory_mb": 512}) as sb:
            seen = []
            sb.on_event(seen.append)
            events = sb.events(types=["exec"], timeout=30)
            r = await sb.exec("echo hi; echo e >&2")
            assert r.stdout == b"hi\n" and r.stderr_text == "e\n"
            ev = await events.__anext__()
            assert ev.type == "exec" and ev.sandbox_id == sb.id
            events.close()

            # Concurrency: many requests in flight from one task group.
            rs = await asyncio.gather(*[sb.exec(["sh", "-c", f"echo {i}"]) for i in range(30)])
            assert [x.stdout for x in rs] == [f"{i}\n".encode() for i in range(30)]
            data = [os.urandom(10000 + i) for i in range(10)]
            await asyncio.gather(*[sb.write_file(f"/tmp/f{i}", d) for i, d in enumerate(data)])
            got = await asyncio.gather(*[sb.read_file(f"/tmp/f{i}") for i in range(10)])
            assert got == data

            p = await sb.start("echo ready; cat; echo end", open_stdin=True)
            c = await p.read_chunk()
            assert c is not None and c.data == b"ready\n"
            await p.write_stdin(b"x\n")
            await p.close_stdin()
            out = b"".join([ch.data async for ch in p])
            assert out == b"x\nend\n" and (await p.wait()).exit_code == 0

            p = await sb.start("trap 'exit 9' INT; echo go; while :; do sleep 0.05; done")
            assert (await p.read_chunk()) is not None
            await p.signal(2)
            assert (await p.wait()).exit_code == 9
            p = await sb.start("sleep 60")
            await p.cancel()
            assert (await p.wait()).killed_by == "signal"
            pid = await sb.start_detached("sleep 60")
            assert pid > 0 and (await sb.exec(["kill", "-0", str(pid)])).exit_code == 0

            await sb.mkdir("/tmp/a/b", parents=True)
            await sb.symlink("b", "/tmp/a/l")
            assert {f.name for f in await sb.list_files("/tmp/a")} == {"b", "l"}
            assert (await sb.stat("/tmp/a/b")).is_dir
            await sb.remove("/tmp/a", recursive=True)
            with pytest.raises(FileNotFoundError):
                await sb.read_file("/tmp/a/b")
            big = os.urandom((3 << 20) + 7)
            assert await sb.upload(big, "/tmp/big", part_size=1 << 20) == len(big)
            parts = [x async for x in sb.iter_file("/tmp/big", part_size=1 << 20)]
            assert b"".join(parts) == big and len(parts) == 4
            assert await sb.read_file("/tmp/big", offset=5, length=5) == big[5:10]
            # Past its first MiB, a whole read and a download go through
            # host files the server writes.
            assert await sb.read_file("/tmp/big") == big
            assert sb.client._host_files is True
            dst = tmp_path / "dst"
            assert await sb.download("/tmp/big", str(dst)) == len(big) and dst.read_bytes() == big
            with pytest.raises(airlock.Unsupported):
                await sb.policy.get()
            await sb.exec("head -c 4194304 /dev/zero > /tmp/fill")  # charged to the commands' memory
            u = await sb.usage()
            assert u.memory_bytes >= 4 << 20 and u.pids >= 1 and u.memory_limit_bytes > 0, u
            await sb.pause()
            with pytest.raises(airlock.SandboxPaused):
                await sb.exec("true")
            await sb.resume()
            assert pid in {p.pid for p in await sb.processes()}
            with pytest.raises(airlock.CommandFailed):
                await sb.exec(["/nope"])
            assert (await sb.client.info()).protocol == 1
        assert sb.client.closed or sb.client._proc.returncode is not None
        assert any(e.type == "lifecycle" for e in seen) or any(e.type == "exec" for e in seen)

    run(main())


def test_async_two_sandboxes_in_parallel() -> None:
    async def one(i: int) -> bytes:
        sb = await aio.Sandbox.create()
        try:
            return (await sb.exec(f"echo {i}")).stdout
        finally:
            await sb.close()

    async def main() -> None:
        assert await asyncio.gather(*[one(i) for i in range(3)]) == [b"0\n", b"1\n", b"2\n"]
        async with await aio.Client.start() as c:
            a = await c.create()
            with pytest.raises(airlock.InvalidParams):
                await c.create(resources={"memory_mbs": 1})
            assert (await a.exec("echo ok")).stdout == b"ok\n"

    run(main())


@pytest.mark.skipif(os.geteuid() != 0 and not os.access("/dev/net/tun", os.R_OK | os.W_OK),
                    reason="a sandbox network needs root or /dev/net/tun")
def test_async_port_forward() -> None:
    async def main() -> None:
        async with aio.Sandbox.create(network={}) as sb:
            await sb.start(["python3", "-c", "import socket\ns = socket.socket(); s.bind(('0.0.0.0', 8000)); s.listen(8)\n"
                                              "while True:\n    c, _ = s.accept(); c.sendall(b'hi'); c.close()\n"])
            pf = await sb.port_forward(8000)
            assert pf.host_ip == "127.0.0.1" and pf.sandbox_port == 8000
            got = b""
            for _ in range(300):
                try:
                    r, w = await asyncio.open_connection(pf.host_ip, pf.host_port)
                    got = await r.read()
                    w.close()
                except OSError:
                    pass
                if got:
                    break
                await asyncio.sleep(0.05)
            assert got == b"hi"
            assert await sb.port_forward_close(pf.host_port) == [pf]
    run(main())
