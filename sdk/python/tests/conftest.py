"""Fixtures: the real `airlock rpc` built from this repository (make build)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Iterator, List

import pytest

HERE = Path(__file__).resolve().parent
SDK = HERE.parent
REPO = SDK.parent.parent
sys.path.insert(0, str(SDK))

import airlock  # noqa: E402


def airlock_bin() -> str:
    b = os.environ.get("AIRLOCK_BIN") or str(REPO / "bin" / "airlock")
    if not os.access(b, os.X_OK):
        pytest.fail(f"{b} is missing: run `make build` first (or set AIRLOCK_BIN)")
    return b


@pytest.fixture(scope="session")
def bin_path() -> str:
    return airlock_bin()


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, bin_path: str) -> None:
    monkeypatch.setenv("AIRLOCK_BIN", bin_path)


@pytest.fixture
def sb(bin_path: str) -> Iterator[airlock.Sandbox]:
    with airlock.Sandbox.create(resources={"memory_mb": 512}) as s:
        yield s


@pytest.fixture
def private_bin(tmp_path: Path, bin_path: str) -> Path:
    """A copy of airlock and airlock-guest at a path of the test's own, so that
    its processes can be told from everyone else's."""
    d = tmp_path / "bin"
    d.mkdir()
    for name in ("airlock", "airlock-guest"):
        shutil.copy2(Path(bin_path).parent / name, d / name)
    return d / "airlock"


def processes_of(directory: Path) -> List[int]:
    """Processes whose executable is under directory."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            exe = os.readlink(p / "exe")
        except OSError:
            continue
        if exe.startswith(str(directory) + "/"):
            out.append(int(p.name))
    return out


def standard_image_cache() -> str:
    """The test image cache that holds `standard` (make images), or skip."""
    d = os.environ.get("AIRLOCK_TEST_IMAGE_CACHE", "")
    if not d:
        pytest.skip("image standard: set AIRLOCK_TEST_IMAGE_CACHE to a cache that holds it (make images builds it)")
    names = Path(d) / "names"
    if not names.is_dir() or not any('"name":"standard"' in f.read_text() for f in names.glob("*.json")):
        pytest.skip(f"image standard is not in {d} (make images builds it, as root)")
    return d


def need_fuse() -> None:
    if os.geteuid() != 0:
        pytest.skip("programmable mounts (the memory mount) need root")
    if not os.path.exists("/dev/fuse"):
        pytest.skip("programmable mounts (the memory mount) need /dev/fuse")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # A run in which nothing passed (everything skipped) must not look green.
    rep = session.config.pluginmanager.get_plugin("terminalreporter")
    if rep is not None and exitstatus == 0 and not rep.stats.get("passed"):
        session.exitstatus = 1
        rep.write_line("error: no test passed (all skipped?)", red=True)
