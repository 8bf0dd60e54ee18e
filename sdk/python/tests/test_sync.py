"""The sync API against the real `airlock rpc`: every method."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path
from typing import List

import pytest

import airlock
from airlock import _protocol as P


def test_exec_buffered(sb: airlock.Sandbox) -> None:
    r = sb.exec("echo hello; echo oops >&2; exit 3")
    assert r.exit_code == 3 and not r.ok
    assert r.stdout == b"hello\n" and r.stdout_text == "hello\n"
    assert r.stderr == b"oops\n" and r.stderr_text == "oops\n"
    assert r.killed_by is None and r.duration_ms >= 0
    r = sb.exec(["sh", "-c", 'printf "%s|%s|%s" "$X" "$(pwd)" "$(cat)"'], env={"X": "1"},
                working_dir="/tmp", stdin=b"in")
    assert r.stdout == b"1|/tmp|in", r
    r = sb.exec(["printf", "\\377\\376"])
    assert r.stdout == b"\xff\xfe" and r.stdout_text == "\ufffd\ufffd"


def test_exec_timeout_and_errors(sb: airlock.Sandbox) -> None:
    r = sb.exec("sleep 30", timeout=0.3)
    assert r.killed_by == "timeout"
    with pytest.raises(airlock.CommandFailed) as e:
        sb.exec(["/no/such/program"])
    assert e.value.exit_code == 127 and e.value.code == -32005 and e.value.method == "exec"
    with pytest.raises(TypeError):
        sb.exec([])


def test_start_stream_stdin(sb: airlock.Sandbox) -> None:
    p = sb.start("echo out; echo err >&2; cat; echo end", open_stdin=True)
    got = {"stdout": b"", "stderr": b""}
    first = p.read_chunk(timeout=30)
    assert first is not None
    got[first.stream] += first.data
    p.write_stdin("from stdin\n")
    p.close_stdin()
    for c in p:
        got[c.stream] += c.data
    r = p.wait()
    assert r.exit_code == 0 and p.done
    assert got["stdout"] == b"out\nfrom stdin\nend\n" and got["stderr"] == b"err\n"
    assert r.stdout == b"" and r.stderr == b""  # all of it was iterated over


def test_start_detached(sb: airlock.Sandbox) -> None:
    pid = sb.start_detached("sleep 1000")
    assert pid > 0
    assert sb.exec(["kill", "-0", str(pid)]).exit_code == 0
    sb.start_detached("cat > /tmp/detached-in", stdin="given")
    deadline = time.monotonic() + 30
    while sb.exec("cat /tmp/detached-in").stdout != b"given":
        assert time.monotonic() < deadline, "the detached command did not read its stdin"
        time.sleep(0.1)
    with pytest.raises(airlock.CommandFailed) as e:
        sb.start_detached(["/no/such/program"])
    assert e.value.exit_code == 127


def test_start_wait_collects(sb: airlock.Sandbox) -> None:
    r = sb.start(["sh", "-c", "seq 1 10000"]).wait()
    assert r.stdout == "".join(f"{i}\n" for i in range(1, 10001)).encode()


def test_signal_and_cancel(sb: airlock.Sandbox) -> None:
    p = sb.start("trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done")
    c = p.read_chunk(timeout=30)
    assert c is not None and c.data == b"ready\n"
    p.signal("TERM")
    r = p.wait(timeout=30)
    assert r.exit_code == 7 and r.stdout == b"got-term\n"
    p = sb.start("sleep 60")
    t = time.monotonic()
    p.cancel()
    r = p.wait(timeout=30)
    assert r.killed_by == "signal" and time.monotonic() - t < 20
    with sb.start("sleep 60") as p:  # leaving the block cancels it
        pass
    assert p.wait(timeout=30).killed_by == "signal"


def test_files(sb: airlock.Sandbox) -> None:
    sb.mkdir("/tmp/d/e", parents=True)
    assert sb.write_file("/tmp/d/e/a.txt", "hello", 0o600) == 5
    assert sb.read_file("/tmp/d/e/a.txt") == b"hello"
    assert sb.read_text("/tmp/d/e/a.txt") == "hello"
    assert sb.read_file("/tmp/d/e/a.txt", offset=1, length=3) == b"ell"
    sb.write_file("/tmp/d/e/a.txt", b"J", offset=0)
    assert sb.read_file("/tmp/d/e/a.txt") == b"Jello"
    sb.write_file("/tmp/d/e/a.txt", b"ab", offset=1, truncate=True)
    assert sb.read_file("/tmp/d/e/a.txt") == b"Jab"
    st = sb.stat("/tmp/d/e/a.txt")
    assert st.name.endswith("a.txt") and st.size == 3 and st.permissions == 0o600 and not st.is_dir
    assert st.mod_time is not None and abs(st.mod_time.timestamp() - time.time()) < 600
    sb.symlink("a.txt", "/tmp/d/e/link")
    names = {f.name: f for f in sb.list_files("/tmp/d/e")}
    assert set(names) == {"a.txt", "link"} and names["link"].link == "a.txt"
    assert sb.stat("/tmp/d").is_dir
    with pytest.raises(airlock.FileNotFound) as e:
        sb.read_file("/tmp/d/missing")
    assert isinstance(e.value, FileNotFoundError) and e.value.kind == "not_found"
    assert e.value.path == "/tmp/d/missing"
    with pytest.raises(FileExistsError):
        sb.mkdir("/tmp/d")
    with pytest.raises(airlock.DirectoryNotEmpty):
        sb.remove("/tmp/d")
    with pytest.raises(IsADirectoryError):
        sb.read_file("/tmp/d")
    sb.remove("/tmp/d", recursive=True)
    with pytest.raises(FileNotFoundError):
        sb.stat("/tmp/d")
    big = os.urandom(3 << 20)
    sb.write_file("/tmp/big", big)
    with pytest.raises(airlock.FileTooLarge):
        sb.read_file("/tmp/big", max_bytes=1 << 20)


def test_upload_download(sb: airlock.Sandbox, tmp_path: Path) -> None:
    data = os.urandom((5 << 20) + 123)
    src = tmp_path / "src"
    src.write_bytes(data)
    assert sb.upload(str(src), "/tmp/up", part_size=1 << 20) == len(data)
    assert sb.exec("sha256sum /tmp/up").stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()
    dst = tmp_path / "dst"
    assert sb.download("/tmp/up", str(dst), part_size=1 << 20) == len(data)
    assert dst.read_bytes() == data
    assert b"".join(sb.iter_file("/tmp/up", part_size=3 << 20, offset=100)) == data[100:]
    assert sb.upload(b"", "/tmp/empty") == 0 and sb.read_file("/tmp/empty") == b""
    assert sb.download("/tmp/empty", str(dst)) == 0


def test_large_read_through_host_file(sb: airlock.Sandbox, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A read past the first MiB goes through a host file the server
    writes; no temporary file is left. When the server refuses the host
    file (here: a symbolic link, which it never follows), the read falls
    back to parts in the answers and is just as whole."""
    data = os.urandom((3 << 20) + 5)
    sb.write_file("/tmp/big", data)
    made: List[str] = []
    real = P.host_file

    def spy() -> str:
        made.append(real())
        return made[-1]
    monkeypatch.setattr(P, "host_file", spy)
    assert sb.read_file("/tmp/big") == data
    assert len(made) == 1 and not os.path.exists(made[0])
    dst = tmp_path / "dst"
    assert sb.download("/tmp/big", str(dst)) == len(data) and dst.read_bytes() == data

    target = tmp_path / "target"
    target.write_bytes(b"")

    def link() -> str:
        p = tmp_path / f"link{len(made)}"
        p.symlink_to(target)
        made.append(str(p))
        return str(p)
    monkeypatch.setattr(P, "host_file", link)
    assert sb.read_file("/tmp/big") == data
    assert target.read_bytes() == b"" and not os.path.lexists(made[-1])
    assert sb._client._host_files is False
    assert sb.read_file("/tmp/big") == data and len(made) == 2


def test_events(sb: airlock.Sandbox) -> None:
    seen = []
    done = threading.Event()

    def handler(ev: airlock.Event) -> None:
        seen.append(ev)
        # A handler may call the client: it runs on a thread of its own.
        if ev.type == "exec" and not done.is_set():
            sb.stat("/tmp")
            done.set()

    remove = sb.on_event(handler)
    with sb.events(types=["file"], timeout=30) as it:
        sb.write_file("/tmp/ev", b"x")
        sb.exec("true")
        ev = next(iter(it))
        assert ev.type == "file" and ev.sandbox_id == sb.id and ev["file"]["path"] == "/tmp/ev"
    assert done.wait(30)
    remove()
    assert {e.type for e in seen} >= {"exec"}
    ex = next(e for e in seen if e.type == "exec")
    assert ex.detail["exit_code"] == 0 and ex["type"] == "exec"
    assert sb.client.subscribe(["exec"]) == ["exec"]
    sb.client.unsubscribe()


def test_usage(sb: airlock.Sandbox) -> None:
    sb.exec("head -c 8388608 /dev/zero > /tmp/fill")
    u = sb.usage()
    assert isinstance(u, airlock.Usage)
    assert u.memory_limit_bytes == 512 << 20
    assert u.memory_bytes >= 8 << 20, u  # the tmpfs file counts
    assert u.pids >= 1 and u.pids_limit > 0 and u.cpu_nanos > 0
    assert u.net_rx_bytes == 0 and u.oom_kills == 0


def test_pause_resume(sb: airlock.Sandbox) -> None:
    pid = sb.start_detached("exec sleep 1000")
    sb.pause()
    assert sb.client.info().sandboxes[0]["state"] == "paused"
    with pytest.raises(airlock.SandboxPaused, match="resume it first"):
        sb.exec("true")
    with pytest.raises(airlock.SandboxPaused):
        sb.read_file("/etc/hostname")
    with pytest.raises(airlock.SandboxPaused, match="already"):
        sb.pause()
    sb.resume()
    assert sb.exec(f"kill -0 {pid} && echo alive").stdout == b"alive\n"
    top = {p.pid: p for p in sb.processes()}
    assert top[pid].command == ("sleep", "1000") and top[pid].state == "S", top
    with pytest.raises(airlock.SandboxPaused, match="not paused"):
        sb.resume()


def test_policy_without_network(sb: airlock.Sandbox) -> None:
    with pytest.raises(airlock.Unsupported):
        sb.policy.get()


@pytest.mark.skipif(os.geteuid() != 0 and not os.access("/dev/net/tun", os.R_OK | os.W_OK),
                    reason="a sandbox network needs root or /dev/net/tun")
def test_policy() -> None:
    with airlock.Sandbox.create(network={}) as sb:
        assert sb.policy.get() == airlock.PolicyResult((), ())
        assert sb.policy.allow("api.example.com").allowed_hosts == ("api.example.com",)
        r = sb.policy.deny("*.bad.example")
        assert r.denied_hosts == ("*.bad.example",)
        assert sb.policy.remove("api.example.com").allowed_hosts == ()
        with pytest.raises(airlock.SandboxNotFound):
            sb.policy.remove("never.example")
        with pytest.raises(airlock.InvalidParams):
            sb.policy.allow("not a host")


_HELLO_SERVER = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8000)); s.listen(8)
while True:
    c, _ = s.accept(); c.sendall(b"hello"); c.close()
"""


def _read_through(host: str, port: int) -> bytes:
    import socket
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection((host, port), timeout=5) as c:
                got = b""
                while True:
                    b = c.recv(100)
                    if not b:
                        break
                    got += b
                if got:
                    return got
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing through {host}:{port}")
        time.sleep(0.05)


def test_port_forward_without_network(sb: airlock.Sandbox) -> None:
    with pytest.raises(airlock.Unsupported) as e:
        sb.port_forward(8000)
    assert "publishing ports needs" in str(e.value)


@pytest.mark.skipif(os.geteuid() != 0 and not os.access("/dev/net/tun", os.R_OK | os.W_OK),
                    reason="a sandbox network needs root or /dev/net/tun")
def test_port_forward() -> None:
    with airlock.Sandbox.create(ports=[{"sandbox_port": 8000}]) as sb:
        assert len(sb.ports) == 1 and sb.ports[0].sandbox_port == 8000 and sb.ports[0].host_ip == "127.0.0.1"
        p = sb.start(["python3", "-c", _HELLO_SERVER])
        assert _read_through(sb.ports[0].host_ip, sb.ports[0].host_port) == b"hello"
        pf = sb.port_forward(8000, host_ip="127.0.0.1")
        assert pf.host_port not in (0, sb.ports[0].host_port) and pf.protocol == "tcp"
        assert _read_through(pf.host_ip, pf.host_port) == b"hello"
        assert sb.port_forward_close(pf.host_port) == [pf]
        with pytest.raises(airlock.SandboxNotFound):
            sb.port_forward_close(pf.host_port)
        with pytest.raises(airlock.InvalidParams):
            sb.port_forward(53, protocol="udp")
        p.cancel()


def test_errors_and_info(bin_path: str) -> None:
    with pytest.raises(airlock.InvalidParams) as e:
        airlock.Sandbox.create(resources={"memory_mbs": 1})
    assert "memory_mbs" in str(e.value)
    with airlock.Client.start() as c:
        a = c.create()
        b = c.create()
        info = c.info()
        assert info.protocol == 1 and {s["sandbox_id"] for s in info.sandboxes} == {a.id, b.id}
        with pytest.raises(airlock.SandboxNotFound):
            c.sandbox("sb-000000000000").exec("true")
        with pytest.raises(airlock.MethodNotFound):
            c.call("no.such.method")
        b.close()
        with pytest.raises(airlock.SandboxNotRunning):
            b.exec("true")
        assert a.exec("echo a").stdout == b"a\n"
    with pytest.raises(airlock.ClientClosed):
        a.exec("true")


def test_binary_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AIRLOCK_BIN")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(airlock.BinaryNotFound) as e:
        airlock.Sandbox.create()
    assert "make build" in str(e.value) and "make install" in str(e.value)
    assert isinstance(e.value, FileNotFoundError)


def test_threads(sb: airlock.Sandbox) -> None:
    errors = []

    def work(i: int) -> None:
        try:
            for j in range(10):
                r = sb.exec(["sh", "-c", f"echo {i}-{j}"])
                assert r.stdout == f"{i}-{j}\n".encode()
                data = os.urandom(1000 + i)
                sb.write_file(f"/tmp/t{i}", data)
                assert sb.read_file(f"/tmp/t{i}") == data
            p = sb.start(["seq", "1", "1000"])
            assert p.wait().stdout.count(b"\n") == 1000
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors


def test_pool_hands_out_sandboxes() -> None:
    with airlock.Client.start() as client:
        pool = client.pool_create(2, env={"FROM": "pool"}, resources={"memory_mb": 256})
        assert pool.startswith("pool-")
        ids = set()
        for i in range(3):
            with client.create(pool=pool) as sb:
                r = sb.exec(f"test -e /tmp/mark && echo reused; touch /tmp/mark; echo {i} $FROM")
                assert r.stdout_text == f"{i} pool\n", r
                ids.add(sb.id)
        assert len(ids) == 3
        pools = client.pool_list()
        assert [p["pool_id"] for p in pools] == [pool] and pools[0]["size"] == 2, pools
        client.pool_close(pool)
        assert client.pool_list() == []
        with pytest.raises(airlock.AirlockError):
            client.create(pool=pool)
