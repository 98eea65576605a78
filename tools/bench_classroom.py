"""Does a watching class slow the engine down? `python -m tools.bench_classroom`

Starts a classroom as `make classroom` does (`python -m engine serve` and `streamlit run app.py`
attached to it), keeps the engine busy with the server's own background load (continuous
traffic above its capacity, the queue capped by max_waiting), and measures the engine's steps/s
in alternating rounds:

  none      no browser on the app
  viewers   N Playwright contexts in one Chromium, each with /classroom open (default 10)

Steps are counted from the server's step records (/lab/steps, t_start_s) within a window that
starts a warm-up after the viewers' pages show the board (the load pauses while they open).
Chromium runs in Linux's idle scheduling class by default: the students' browsers are not on the
server, so here they get only what it leaves (`--browser normal` lets them compete as equals). Each round also prints the CPU
(cores: CPU seconds per second) of the engine server, the app and Chromium, from /proc.
Goal: with 10 viewers the step rate stays >= 70% of its rate with none. Needs Debian's
Chromium. On two CPU cores the default run takes about 12 minutes, most of it the ten pages
loading; `--model tiny --viewers 3 --rounds 1` for a quick try. A measurement, not a test: on a
shared machine, run it a few times.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from engine.cli.launch import launched
from tools.bench_ui_overhead import (BROWSER_CLASSES, CHROMIUM, ROOT, browser_pids, cpu_s,
                                     engine_cpu_s, free_port, launch_browser)

GOAL = 0.70
BOARD = ".st-key-cr_membership iframe"       # the shared batch chart (ui/live_chart.py): the board is shown
MAX_WAITING = 32                                      # a bounded queue: the same engine all run long
LOAD = {"continuous": True, "rate": 8.0, "prompt_lo": 32, "prompt_hi": 64,
        "output_lo": 64, "output_hi": 128, "seed": 0}


def started(cmd: list[str], env: dict, health: str, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while True:
        try:
            with urllib.request.urlopen(health, timeout=2):
                return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                sys.exit(f"{cmd[2]} did not come up:\n{log.read_text()[-2000:]}")
            time.sleep(0.5)


def call(url: str, method: str = "GET", body: dict | None = None, token: str = "") -> dict:
    req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def measure(engine_url: str, pids: dict[str, list[int]], window_s: float) -> tuple[float, dict[str, float], int]:
    """Steps/s over the next window_s (from the step records' t_start_s), each process's cores, and
    the fewest requests waiting at any of those steps (above 0: the engine never ran short of work)."""
    first = call(f"{engine_url}/lab/steps?stream=false")["next"]
    pids = {**pids, "Chromium": browser_pids()}
    server = pids["engine"][0]
    cpu0, e0, t0 = {k: sum(map(cpu_s, v)) for k, v in pids.items()}, engine_cpu_s(server), time.monotonic()
    time.sleep(window_s)
    dt = time.monotonic() - t0
    cores = {k: (sum(map(cpu_s, v)) - cpu0[k]) / dt for k, v in pids.items()}
    cores["engine threads of it"] = (engine_cpu_s(server) - e0) / dt
    steps = call(f"{engine_url}/lab/steps?stream=false&since={first}")["steps"]
    steps = [s for s in steps if s["t_start_s"] <= steps[0]["t_start_s"] + window_s] if steps else []
    starts = [s["t_start_s"] for s in steps]
    rate = (len(starts) - 1) / (starts[-1] - starts[0]) if len(starts) > 1 else float("nan")
    return rate, cores, min((s["waiting"] for s in steps), default=0)


def open_viewers(browser, url: str, n: int) -> list:
    contexts = [browser.new_context(viewport={"width": 1400, "height": 1800}) for _ in range(n)]
    pages = [c.new_page() for c in contexts]
    for page in pages:
        page.set_default_timeout(180_000)
        page.goto(url)
    for page in pages:
        page.locator(BOARD).first.wait_for()
    return contexts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="smollm2 (default) or tiny for a quick try")
    ap.add_argument("--viewers", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2, help="rounds of each: none, viewers, none, ...")
    ap.add_argument("--warm", type=float, default=5.0, help="seconds after the pages show the board")
    ap.add_argument("--window", type=float, default=20.0, help="seconds of steps counted")
    ap.add_argument("--rate", type=float, default=LOAD["rate"], help="background load, requests/s")
    ap.add_argument("--browser", choices=BROWSER_CLASSES, default="idle",
                    help="Chromium's scheduling class: idle (default: the students' browsers are not on "
                         "the server, so they get what it leaves) or normal (they compete as equals)")
    args = ap.parse_args(argv)
    if not os.path.exists(CHROMIUM):
        sys.exit(f"needs Debian's Chromium at {CHROMIUM}")

    from playwright.sync_api import sync_playwright
    token, engine_port, app_port = secrets.token_urlsafe(12), free_port(), free_port()
    engine_url, app_url = f"http://127.0.0.1:{engine_port}", f"http://127.0.0.1:{app_port}"
    env = {k: v for k, v in os.environ.items()     # no other engine choice or model leaks in
           if not k.startswith(("BATCHING_LAB_ENGINE", "BATCHING_LAB_METRICS", "BATCHING_LAB_MODEL"))}
    env.update(BATCHING_LAB_INSTRUCTOR_TOKEN=token, BATCHING_LAB_ENGINE_URL=engine_url, PYTHONPATH=str(ROOT))
    logs = Path(tempfile.mkdtemp(prefix="bench_classroom-"))
    t_begin, procs, rows, stack = time.monotonic(), [], [], contextlib.ExitStack()
    try:
        server = stack.enter_context(launched(["--model", args.model, "--trusted-client", "127.0.0.1"],
                                              port=engine_port, env=env, log=logs / "engine.log", timeout_s=180))
        procs.append(started([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                              "--server.port", str(app_port), "--server.address", "127.0.0.1",
                              "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"],
                             env, app_url + "/_stcore/health", logs / "app.log"))
        pids = {"engine": [server.process.pid], "app": [procs[0].pid]}
        call(engine_url + "/lab/policy", "PUT", {"max_waiting": MAX_WAITING}, token)
        call(engine_url + "/lab/load", "PUT", {"running": True, **LOAD, "rate": args.rate}, token)
        print(f"{args.model}: background load {args.rate:g} req/s, max_waiting {MAX_WAITING}; "
              f"window {args.window:g} s after {args.warm:g} s warm-up; Chromium in the {args.browser} scheduling class",
              flush=True)
        with sync_playwright() as p:
            browser = launch_browser(p, args.browser)
            for i in range(2 * args.rounds):
                n, t_open = args.viewers if i % 2 else 0, time.monotonic()
                if n:       # the pages load while the engine rests (in the idle class they would wait
                            # for the engine's leftovers for many minutes), then the load comes back
                    call(engine_url + "/lab/load", "PUT", {"running": False}, token)
                contexts = open_viewers(browser, f"{app_url}/classroom", n)
                if n:
                    call(engine_url + "/lab/load", "PUT", {"running": True, **LOAD, "rate": args.rate}, token)
                t_open = time.monotonic() - t_open
                time.sleep(args.warm)
                rate, cores, waiting = measure(engine_url, pids, args.window)
                for c in contexts:
                    c.close()
                rows.append((n, rate))
                print(f"round {i + 1}: {n:2d} viewers  {rate:6.2f} steps/s   (cores: "
                      + ", ".join(f"{k} {v:.2f}" for k, v in cores.items())
                      + f"; fewest waiting {waiting}; pages up in {t_open:.0f} s)", flush=True)
            browser.close()
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        stack.close()                       # the engine server last
    ratios = [b / a for (_, a), (_, b) in zip(rows[::2], rows[1::2])]
    if ratios:
        med = statistics.median(ratios)
        print(f"median ratio {args.viewers} viewers / none: {med:.2f}  (per pair: "
              f"{', '.join(f'{r:.2f}' for r in ratios)}; goal >= {GOAL:.2f}: {'met' if med >= GOAL else 'NOT met'})")
    print(f"took {time.monotonic() - t_begin:.0f} s; logs in {logs}")


if __name__ == "__main__":
    main()
