"""The airlock process ends with the sandbox, and with the Python process;
a large download keeps memory flat."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import airlock
from conftest import SDK, processes_of


def gone(pid: int, within: float = 30) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not Path(f"/proc/{pid}").exists():
            return True
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_process_ends_with_sandbox(private_bin: Path) -> None:
    sb = airlock.Sandbox.create(binary=str(private_bin))
    pid = sb.client.pid
    agent = sb.client.info().sandboxes[0]["pid"]
    assert sb.exec("true").ok
    sb.close()
    assert sb.client._proc.returncode == 0
    assert gone(pid) and gone(agent)
    assert processes_of(private_bin.parent) == []


@pytest.mark.parametrize("how", ["exit", "SIGKILL"])
def test_process_ends_with_python(private_bin: Path, how: str) -> None:
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(SDK)!r})
        import airlock
        sb = airlock.Sandbox.create(binary={str(private_bin)!r})
        sb.start("sleep 600")
        print(sb.client.pid, sb.client.info().sandboxes[0]["pid"], flush=True)
        if {how!r} == "SIGKILL":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(0)  # no close, no finalizers
    """)
    out = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, timeout=60)
    server, agent = map(int, out.stdout.split())
    assert gone(server), "airlock rpc outlived the Python process"
    assert gone(agent), "the sandbox outlived the Python process"
    end = time.monotonic() + 30
    while processes_of(private_bin.parent) and time.monotonic() < end:
        time.sleep(0.1)
    assert processes_of(private_bin.parent) == []


def vm_hwm_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def reset_hwm() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def test_download_1gib_flat_memory(tmp_path: Path) -> None:
    """1 GiB through read_file in parts (offset/length), memory bounded by
    the parts in flight. The file is sparse on the host, given to the
    sandbox by a direct mount, so that no disk or tmpfs holds it."""
    size = 1 << 30
    host = tmp_path / "data"
    host.mkdir()
    with open(host / "big", "wb") as f:
        f.truncate(size)
        f.seek(size - 5)
        f.write(b"tail!")
    with airlock.Sandbox.create(vfs={"direct_mounts": {"/data": {"host_path": str(host), "readonly": True}}}) as sb:
        assert sb.stat("/data/big").size == size
        h = hashlib.sha256()
        n = 0
        reset_hwm()
        before = vm_hwm_kib()
        for part in sb.iter_file("/data/big"):
            h.update(part)
            n += len(part)
        grown_mib = (vm_hwm_kib() - before) / 1024
    want = hashlib.sha256()
    with open(host / "big", "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            want.update(block)
    assert n == size and h.hexdigest() == want.hexdigest()
    # Two parts in flight of 8 MiB: their lines (base64), the decoded bytes.
    assert grown_mib < 160, f"peak memory grew by {grown_mib:.0f} MiB over a 1 GiB download"
