"""Memory of long and repeated live runs (a measurement, not a test).

  live      a continuous-traffic LiveRun on the cost model (virtual clock) for 30 minutes of
            engine steps: the process's RSS and the snapshot and table-update times every few
            thousand steps. Goal: RSS growth after warm-up < 50 MB, snapshot time flat.
  browser   four Start+reload cycles of the Playground in Debian's Chromium (headless,
            Playwright) against `streamlit run app.py`, reading the server's RSS after each.
            Goal: RSS comes back within 10% of its level after the first cycle.

    python -m tools.bench_memory live [--minutes 30] [--keep-steps 2000] (0 = keep every step)
    python -m tools.bench_memory browser [--cycles 4]
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# A Playground workload that keeps SmolLM2 busy for the whole cycle.
CYCLE_QUERY = "rate=0&num_requests=24&prompt_lo=32&prompt_hi=48&output_lo=200&output_hi=300"


def rss_mb(pid: int | str = "self") -> float:
    """Resident memory of a process (VmRSS in /proc/<pid>/status), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


# ----------------------------------------------------------------------------- live


def live(minutes: float, keep_steps: int | None, every: int) -> None:
    from analysis.tables import TraceTables
    from engine.core.config import SchedulerPolicy
    from engine.runs.live import LiveRun
    from engine.runs.workload import WorkloadSpec

    # rate 3 req/s keeps the cost-model engine busy without its queue growing without end.
    spec = WorkloadSpec(num_requests=1_000_000, rate=3.0, prompt_lo=32, prompt_hi=256,
                        output_lo=16, output_hi=96, seed=1)
    run = LiveRun(SchedulerPolicy(max_num_seqs=16), spec, keep_steps=keep_steps)
    tables = TraceTables()
    print(f"keep_steps={keep_steps}; reports every {every:,} steps")
    print(f"{'steps':>8} {'engine s':>9} {'RSS MB':>8} {'snapshot ms':>12} {'tables ms':>10} "
          f"{'kept steps':>10} {'events':>8} {'requests':>9} {'waiting':>8}")
    run.start()
    rows, next_report = [], every
    while run.engine.clock.now() < minutes * 60 and run.state == "running":
        run.heartbeat()
        if run.engine.step_count < next_report:
            time.sleep(0.05)
            continue
        next_report += every
        t0 = time.perf_counter()
        snap = run.snapshot(summary=False)
        t1 = time.perf_counter()
        tables.update(snap)
        t2 = time.perf_counter()
        eng = run.engine
        row = (eng.step_count, snap.now_s, rss_mb(), 1000 * (t1 - t0), 1000 * (t2 - t1))
        rows.append(row)
        print(f"{row[0]:>8,} {row[1]:>9.0f} {row[2]:>8.1f} {row[3]:>12.1f} {row[4]:>10.1f} "
              f"{len(eng.steps):>10,} {len(eng.events):>8,} {len(eng.requests):>9,} "
              f"{len(eng.scheduler.waiting):>8,}")
    summary = run.snapshot().summary
    run.close()
    if len(rows) < 3:
        print("too short to judge")
        return
    warm = rows[1]                              # after warm-up: the window has filled
    growth = rows[-1][2] - warm[2]
    print(f"\nwhole run: {summary['steps']:,} steps, {summary['requests']:,} requests, "
          f"{summary['finished']:,} finished; percentiles over {summary.get('percentiles_over')}")
    print(f"RSS growth after warm-up ({warm[0]:,} -> {rows[-1][0]:,} steps): {growth:+.1f} MB "
          f"(goal < 50 MB: {'met' if growth < 50 else 'NOT met'})")
    print(f"snapshot ms at warm-up / end: {warm[3]:.1f} / {rows[-1][3]:.1f}; "
          f"tables ms: {warm[4]:.1f} / {rows[-1][4]:.1f}")


# ----------------------------------------------------------------------------- browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(port: int, log) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "BATCHING_LAB_MODEL"}   # the default model
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1",
         "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.read() == b"ok":
                    return proc
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("streamlit did not come up")
        time.sleep(0.3)


def browser(cycles: int, settle_s: float) -> None:
    from playwright.sync_api import sync_playwright

    port = _free_port()
    (ROOT / "test-output").mkdir(exist_ok=True)
    with open(ROOT / "test-output" / "bench-memory-server.log", "w") as log:
        server = _serve(port, log)
    url = f"http://127.0.0.1:{port}/playground?{CYCLE_QUERY}"
    status = "[data-testid=stMarkdownContainer] p"
    levels = []
    try:
        with sync_playwright() as p:
            chrome = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            page = chrome.new_page(viewport={"width": 1400, "height": 1600})
            page.set_default_timeout(120_000)
            page.goto(url)
            page.locator(status, has_text="Engine:").first.wait_for()     # the model is loaded
            print(f"server idle with the page open: {rss_mb(server.pid):.0f} MB")
            for cycle in range(1, cycles + 1):
                page.locator(status, has_text="Engine:").first.wait_for()
                page.get_by_role("button", name="Start").click()
                page.locator(status, has_text="Engine: running").first.wait_for()
                time.sleep(8)                              # steps, charts, downloads drawn
                running = rss_mb(server.pid)
                page.reload()                              # a fresh session; the old one is gone
                page.locator(status, has_text="Engine: idle").first.wait_for()
                time.sleep(settle_s)                       # its engine notices and lets go
                levels.append(rss_mb(server.pid))
                print(f"cycle {cycle}: {running:.0f} MB while running, {levels[-1]:.0f} MB "
                      f"{settle_s:.0f} s after the reload")
            chrome.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    worst = max(levels[1:], default=levels[0])
    print(f"after cycle 1: {levels[0]:.0f} MB; highest after a later cycle: {worst:.0f} MB "
          f"({100 * (worst / levels[0] - 1):+.1f}%, goal within 10%: "
          f"{'met' if worst <= 1.1 * levels[0] else 'NOT met'})")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    a = sub.add_parser("live")
    a.add_argument("--minutes", type=float, default=30.0, help="engine-clock minutes to run")
    a.add_argument("--keep-steps", type=int, default=2000, help="the run's window; 0 keeps every step")
    a.add_argument("--every", type=int, default=5000, help="report every this many steps")
    b = sub.add_parser("browser")
    b.add_argument("--cycles", type=int, default=4)
    b.add_argument("--settle-s", type=float, default=10.0, help="wait after each reload")
    args = ap.parse_args(argv)
    if args.what == "live":
        live(args.minutes, args.keep_steps or None, args.every)
    else:
        browser(args.cycles, args.settle_s)


if __name__ == "__main__":
    main()
