"""The repository README's Python quick-start runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import REPO, SDK


def test_readme_python_quickstart(bin_path: str) -> None:
    text = (REPO / "README.md").read_text()
    i = text.index("\n### Python\n")
    m = re.search(r"```python\n(.*?)```", text[i:], re.S)
    assert m, "the README's Python section has no python block"
    env = dict(os.environ, AIRLOCK_BIN=bin_path, PYTHONPATH=str(SDK))
    out = subprocess.run([sys.executable, "-c", m.group(1)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, timeout=120)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    text_out = out.stdout.decode()
    assert "stdout b'piped\\n'" in text_out and "missing: /workspace/missing" in text_out, text_out
