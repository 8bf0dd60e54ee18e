"""The seed's own Python client (seed 000, "Client Libraries"), copied at
test time and changed only in its binary name, runs its usage example
against `airlock --rpc`: image standard, a memory mount at /workspace,
write, exec `python /workspace/hello.py`, read, list and events. It ends
cleanly, with no process left behind."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, need_fuse, processes_of, standard_image_cache


def seed_python_client() -> str:
    candidates = sorted(glob.glob("/work/shared/seeds/000_*.txt")) + \
        sorted(glob.glob(str(REPO.parent / "shared" / "seeds" / "000_*.txt")))
    if not candidates:
        pytest.skip("seed 000 not found (/work/shared/seeds or ../shared/seeds beside the repository)")
    text = Path(candidates[0]).read_text()
    i = text.index("#### Client Libraries")
    j = text.index("**Python:**", i)
    m = re.search(r"```python\n(.*?)```", text[j:], re.S)
    assert m, "no python block under Client Libraries"
    return m.group(1)


# What the example is checked with after it ran: the same class, for list
# and events (the example itself registers a handler for network events).
EXTRA = '''
events = []
with Sandbox({'image': 'standard', 'vfs': {'mounts': {'/workspace': {'type': 'memory'}}}}) as sb:
    sb.on_event(events.append)
    sb.write_file('/workspace/hello.py', 'print("Hello from sandbox!")')
    print("EXTRA", sb.exec('python /workspace/hello.py')['stdout'].strip())
    print("LIST", sorted(f['name'] for f in sb.list_files('/workspace')))
print("EVENTS", sorted({e['type'] for e in events}))
'''


def test_seed_python_client(private_bin: Path, tmp_path: Path) -> None:
    need_fuse()
    cache = standard_image_cache()
    code = seed_python_client()
    assert code.count("['sandbox', '--rpc']") == 1
    code = code.replace("['sandbox', '--rpc']", f"[{str(private_bin)!r}, '--rpc']")
    # The example uses os without importing it; the prelude gives it os, and
    # a stand-in key for its network secret.
    script = tmp_path / "seed_client.py"
    script.write_text("import os\n" + code + EXTRA)
    env = dict(os.environ, AIRLOCK_CACHE_DIR=cache, OPENAI_API_KEY="sk-test-not-a-key")
    out = subprocess.run([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env, timeout=300)
    stdout = out.stdout.decode()
    assert out.returncode == 0, f"stdout:\n{stdout}\nstderr:\n{out.stderr.decode()[-3000:]}"
    lines = stdout.splitlines()
    assert "Hello from sandbox!" in lines, stdout
    assert """b'{"status": "ok"}'""" in lines, stdout
    assert "EXTRA Hello from sandbox!" in lines, stdout
    assert "LIST ['hello.py']" in lines, stdout
    ev = next(ln for ln in lines if ln.startswith("EVENTS"))
    assert "'exec'" in ev and "'file'" in ev and "'lifecycle'" in ev, ev
    end = time.monotonic() + 10
    while processes_of(private_bin.parent) and time.monotonic() < end:
        time.sleep(0.1)
    assert processes_of(private_bin.parent) == [], "processes left behind"
