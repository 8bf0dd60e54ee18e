#!/usr/bin/env python3
"""Exec round trip of `true` and a 64 MiB read_file through the Python SDK
(sync and asyncio), next to the Go client (bench/cmd/airlock-sdkbench) in
the same run, each against a fresh `airlock rpc`.

    python3 sdk/python/bench/bench.py [--airlock bin/airlock] [--exec 300] [--reads 5]

Targets: round trip at most 1.5x the Go client's, read at least 150 MB/s."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent
sys.path.insert(0, str(HERE.parent))

import airlock  # noqa: E402
from airlock import aio  # noqa: E402

SIZE = 64 << 20
CREATE = {"resources": {"memory_mb": 1024}, "disk_mb": 256}


def pct(v: "list[float]", p: float) -> float:
    s = sorted(v)
    return s[int((len(s) - 1) * p)]


def bench_sync(n: int, reads: int) -> dict:
    with airlock.Sandbox.create(**CREATE) as sb:
        for _ in range(20):
            sb.exec(["true"])
        rt = []
        for _ in range(n):
            t = time.perf_counter()
            sb.exec(["true"])
            rt.append((time.perf_counter() - t) * 1000)
        sb.write_file("/tmp/bench.bin", bytes(i * 7 & 0xFF for i in range(256)) * (SIZE // 256))
        mbps = []
        for _ in range(reads):
            t = time.perf_counter()
            b = sb.read_file("/tmp/bench.bin")
            assert len(b) == SIZE
            mbps.append(SIZE / (time.perf_counter() - t) / 1e6)
    return {"exec_true_ms_median": statistics.median(rt), "exec_true_ms_p90": pct(rt, 0.9),
            "read_64mib_mbps": statistics.median(mbps)}


async def bench_async(n: int, reads: int) -> dict:
    async with aio.Sandbox.create(**CREATE) as sb:
        for _ in range(20):
            await sb.exec(["true"])
        rt = []
        for _ in range(n):
            t = time.perf_counter()
            await sb.exec(["true"])
            rt.append((time.perf_counter() - t) * 1000)
        await sb.write_file("/tmp/bench.bin", bytes(SIZE))
        mbps = []
        for _ in range(reads):
            t = time.perf_counter()
            b = await sb.read_file("/tmp/bench.bin")
            assert len(b) == SIZE
            mbps.append(SIZE / (time.perf_counter() - t) / 1e6)
    return {"exec_true_ms_median": statistics.median(rt), "exec_true_ms_p90": pct(rt, 0.9),
            "read_64mib_mbps": statistics.median(mbps)}


def bench_go(binary: str, n: int, reads: int) -> dict:
    exe = REPO / "bin" / "airlock-sdkbench"
    subprocess.run(["go", "build", "-o", str(exe), "./bench/cmd/airlock-sdkbench"], cwd=REPO, check=True)
    out = subprocess.run([str(exe), "-airlock", binary, "-exec", str(n), "-reads", str(reads)],
                         stdout=subprocess.PIPE, check=True)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--airlock", default=os.environ.get("AIRLOCK_BIN") or str(REPO / "bin" / "airlock"))
    ap.add_argument("--exec", type=int, default=300)
    ap.add_argument("--reads", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2, help="alternate the clients this many times")
    a = ap.parse_args()
    os.environ["AIRLOCK_BIN"] = a.airlock
    res: "dict[str, list[dict]]" = {"go client": [], "python (sync)": [], "python (asyncio)": []}
    for _ in range(a.rounds):
        res["go client"].append(bench_go(a.airlock, a.exec, a.reads))
        res["python (sync)"].append(bench_sync(a.exec, a.reads))
        res["python (asyncio)"].append(asyncio.run(bench_async(a.exec, a.reads)))
    go_rt = statistics.median(r["exec_true_ms_median"] for r in res["go client"])
    print(f"{'client':18} {'exec true (median ms)':>22} {'p90 ms':>8} {'x go':>6} {'read 64 MiB (MB/s)':>19}")
    for name, rs in res.items():
        rt = statistics.median(r["exec_true_ms_median"] for r in rs)
        p90 = statistics.median(r["exec_true_ms_p90"] for r in rs)
        mb = statistics.median(r["read_64mib_mbps"] for r in rs)
        print(f"{name:18} {rt:22.3f} {p90:8.3f} {rt / go_rt:6.2f} {mb:19.0f}")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(json.dumps({name: {
        "exec_true_ms_median": statistics.median(r["exec_true_ms_median"] for r in rs),
        "exec_true_ms_p90": statistics.median(r["exec_true_ms_p90"] for r in rs),
        "read_64mib_mbps": statistics.median(r["read_64mib_mbps"] for r in rs),
    } for name, rs in res.items()}))


if __name__ == "__main__":
    main()
