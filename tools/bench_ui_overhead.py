"""Does watching slow the engine down? `python -m tools.bench_ui_overhead`

Measures the engine's steps/s on the same policy and workload two ways, in alternating rounds:

  headless  a PlaygroundRun (LiveRun on the real model) in a process with no UI
  page      `streamlit run app.py` with the Playground open in Chromium, live views refreshing

With --baseline cli, each round also runs `python -m engine run` itself on the same requests and
policy (a workload file written from the page's setup), stopped after the window: the engine as
the CLI runs it, and the ratios no viewer/CLI (headless) and one viewer/CLI (page).

With --pin, the server (engine and app) and the headless engine run on CPU 0 and Chromium alone
on CPU 1: the browser then takes nothing from the engine, as a learner's own browser on their
own computer would not, and the ratio is the server's own cost of a viewer.

Each page round ends with Reset, and the next round waits until the server's engine threads are
idle: a closed page's run would go on for the reload grace period, beside the headless engine.

It prints each round and the median ratio page/headless, and the app's own CPU: the server
process's CPU less that of its engine threads (named by engine/model/threads.py name_os_thread). Steps are counted from the step
records (t_start/t_end on the engine's clock) inside the same window after warm-up; for the
page, the records come from the page's own steps.csv download. Both run with app.py's process
setting (the engine's own OpenMP wait, engine/__init__.py), so the ratio is the UI's cost alone. Needs Debian's Chromium.
A measurement, not a test: on a shared machine, run it a few times.
"""
from __future__ import annotations

import argparse
import math
import os
import signal

import engine  # noqa: E402,F401  (first, as app.py: the engine's OpenMP wait, before torch loads)
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

import pandas as pd

from engine.model.threads import OS_THREAD_NAME
from playground.pace import interval_said
from playground.setup import Setup

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
# Everything arrives at once and decodes long: a steady batch of max_num_seqs decode steps.
# Chromium shares this machine's cores with the server here, which a learner's own browser does
# not. By default it runs in Linux's idle scheduling class (SCHED_IDLE): it gets the CPU time the
# server leaves, as if it ran elsewhere, and the server's own cost of a viewer is what is measured.
# (A nice value is not enough: Chromium sets its own processes' nice values, -8 to 5, as root.)
BROWSER_CLASSES = ("idle", "normal")
SETUP = Setup(rate=0.0, num_requests=24, prompt_lo=32, prompt_hi=48, output_lo=400, output_hi=400,
              max_num_seqs=16)


def rate_in_window(t_start, t_end, warm_s: float, window_s: float) -> float:
    """Steps per second among the steps that ended within [first start + warm, + window]."""
    t_start, t_end = list(t_start), list(t_end)
    if not t_start:
        return float("nan")
    lo = t_start[0] + warm_s
    ends = [e for e in t_end if lo <= e <= lo + window_s]
    if len(ends) < 2:
        return float("nan")
    return (len(ends) - 1) / (ends[-1] - ends[0])


def headless(model, warm_s: float, window_s: float) -> float:
    from playground.run import PlaygroundRun
    lab = PlaygroundRun(SETUP, model)
    lab.start()
    time.sleep(warm_s + window_s + 0.5)
    snap = lab.live.snapshot(summary=False)
    lab.stop()
    return rate_in_window((s.t_start_s for s in snap.steps), (s.t_end_s for s in snap.steps),
                          warm_s, window_s)


def cli(warm_s: float, window_s: float) -> float:
    """Steps/s of `python -m engine run` on SETUP's requests and policy, in the same window."""
    from dataclasses import asdict

    from engine.runs.arrivals import build_requests
    from engine.model.model import load_model
    from engine.runs.workload import PromptMaker, write_jsonl
    tmp = Path(tempfile.mkdtemp(prefix="bench_ui_cli-"))
    write_jsonl(str(tmp / "w.jsonl"), build_requests(SETUP.workload(), PromptMaker(load_model("smollm2").tokenizer)))
    flags = []
    for name, value in asdict(SETUP.policy()).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else f"--no-{flag[2:]}")
        elif value is not None:
            flags += [flag, str(value)]
    proc = subprocess.Popen([sys.executable, "-m", "engine", "run", "--model", "smollm2", "--workload",
                             str(tmp / "w.jsonl"), "--out", str(tmp / "run"), *flags], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = []
    reader = threading.Thread(target=lambda: err.extend(iter(lambda: proc.stderr.read(64), "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 300
    while "generating" not in "".join(err) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)                          # loading the model; its progress bar starts with the steps
    time.sleep(warm_s + window_s + 3.0)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)          # Ctrl-C: the CLI writes what it has and stops
    proc.wait(timeout=120)
    reader.join(timeout=5)
    if not (tmp / "run" / "steps.csv").exists():
        raise RuntimeError(f"engine run wrote no steps.csv: {''.join(err)[-500:]}")
    df = pd.read_csv(tmp / "run" / "steps.csv")
    return rate_in_window(df["t_start_s"], df["t_end_s"], warm_s, window_s)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, trace: str = "") -> subprocess.Popen:
    """`streamlit run app.py` on `port`; with `trace`, through tools.trace_steps, which writes
    every step the app's engine takes to that file."""
    env = {k: v for k, v in os.environ.items() if k != "BATCHING_LAB_MODEL"}
    argv = ([sys.executable, "-m", "tools.trace_steps", "serve", str(port), trace] if trace else
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
             "--server.port", str(port), "--server.address", "127.0.0.1",
             "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"])
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.read() == b"ok":
                    return proc
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("streamlit did not come up")


HZ = os.sysconf("SC_CLK_TCK")


def stat_cpu_s(stat: Path) -> float:
    """CPU seconds (user + system) in a /proc .../stat file; 0 once the process or thread is gone."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / HZ
    except OSError:
        return 0.0


def cpu_s(pid: int) -> float:
    """CPU seconds a process has used (all its threads, finished ones included)."""
    return stat_cpu_s(Path(f"/proc/{pid}/stat"))


def engine_cpu_s(pid: int) -> float:
    """CPU seconds of the process's live engine threads: those the operating system knows by the
    engine's name (engine/model/threads.py), the engine's thread and its OpenMP workers."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            if (task / "comm").read_text().strip() == OS_THREAD_NAME:
                total += stat_cpu_s(task / "stat")
        except OSError:            # the thread ended
            pass
    return total


def descendants(root: int) -> list[int]:
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def browser_pids() -> list[int]:
    """This process's Chromium processes (children of Playwright's driver)."""
    pids = []
    for pid in descendants(os.getpid()):
        try:
            if b"chromium" in Path(f"/proc/{pid}/cmdline").read_bytes()[:300]:
                pids.append(pid)
        except OSError:
            pass
    return pids


def launch_browser(playwright, sched: str = "idle", cpu: int | None = None):
    """Chromium, headless; sched "idle" starts it through `chrt --idle`, so every process and thread
    it makes inherits the idle class; "normal" lets it compete with the server as any program does.
    cpu: run it (every process it makes) on that CPU only."""
    path = CHROMIUM
    prefix = ("chrt --idle 0 " if sched == "idle" else "") + (f"taskset -c {cpu} " if cpu is not None else "")
    if prefix:
        wrapper = Path(tempfile.mkdtemp(prefix="chromium-wrapped-")) / "chromium"
        wrapper.write_text(f'#!/bin/sh\nexec {prefix}{CHROMIUM} "$@"\n')
        wrapper.chmod(0o755)
        path = str(wrapper)
    return playwright.chromium.launch(executable_path=path, headless=True, args=ARGS)


def download_steps(page) -> pd.DataFrame:
    for attempt in range(3):   # a click during a page rerun can cancel the download: try again
        try:
            with page.expect_download() as download:
                page.get_by_role("button", name="steps.csv").click()
            return pd.read_csv(download.value.path())
        except Exception:
            if attempt == 2:
                raise
            time.sleep(1)


def wait_engine_idle(server_pid: int, timeout_s: float = 90.0) -> None:
    """Until the server's engine threads have stopped using the CPU (a run still stepping would
    share the cores with the next headless round)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = engine_cpu_s(server_pid)
        time.sleep(1.0)
        if engine_cpu_s(server_pid) - before < 0.05:
            return
    print(f"the server's engine was still busy after {timeout_s:.0f} s", flush=True)


def with_page(browser, url: str, warm_s: float, window_s: float, server_pid: int = 0,
              cpu: dict | None = None) -> float | None:
    context = browser.new_context(viewport={"width": 1500, "height": 1400}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.goto(f"{url}/playground?{urlencode(SETUP.to_query())}")
    page.locator("[data-testid=stMarkdownContainer] p", has_text="Engine:").first.wait_for()
    page.get_by_role("button", name="Start").click()
    page.get_by_text("Engine: running").first.wait_for()
    time.sleep(warm_s)
    chrome = browser_pids()
    s0, e0, c0, t0 = cpu_s(server_pid), engine_cpu_s(server_pid), sum(map(cpu_s, chrome)), time.monotonic()
    time.sleep(window_s + 0.5)
    if cpu is not None and window_s:
        dt = time.monotonic() - t0
        cpu["server"] = (cpu_s(server_pid) - s0) / dt
        cpu["engine"] = (engine_cpu_s(server_pid) - e0) / dt     # its threads; the rest is the app's
        cpu["browser"] = (sum(map(cpu_s, chrome)) - c0) / dt
        said = interval_said(page.locator("[data-testid=stMain]").inner_text())
        cpu["refresh_s"] = math.nan if said is None else said    # the page's pace (playground/pace.py)
    steps = download_steps(page) if window_s else None
    page.get_by_role("button", name="Reset", exact=True).click()   # a closed page's run would go on for
    context.close()                                                  # the reload grace period (playground.reattach)
    wait_engine_idle(server_pid)
    if steps is None:
        return None
    return rate_in_window(steps["t_start_s"], steps["t_end_s"], warm_s, window_s)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warm", type=float, default=4.0, help="seconds skipped after the first step")
    ap.add_argument("--window", type=float, default=12.0, help="seconds of steps counted")
    ap.add_argument("--browser", choices=BROWSER_CLASSES, default="idle",
                    help="Chromium's scheduling class: idle (default: it gets what the server leaves) "
                         "or normal (it competes with the server as equals)")
    ap.add_argument("--baseline", choices=("headless", "cli"), default="headless",
                    help="cli: also run `python -m engine run` on the same requests and policy each round, "
                         "and give the headless run (no viewer) and the page (one viewer) against it")
    ap.add_argument("--pin", action="store_true",
                    help="the server and the headless engine on CPU 0, Chromium alone on CPU 1")
    args = ap.parse_args(argv)
    if not os.path.exists(CHROMIUM):
        sys.exit(f"needs Debian's Chromium at {CHROMIUM}")
    browser_cpu = None
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            sys.exit("--pin needs two CPUs")
        import torch
        os.sched_setaffinity(0, {cpus[0]})     # inherited by the server process, which starts below
        torch.set_num_threads(1)               # the headless engine: one thread, as the server's
        browser_cpu = cpus[1]

    from playwright.sync_api import sync_playwright
    from engine.model.model import load_model
    model = load_model("smollm2")     # the model the server runs too (start_server drops BATCHING_LAB_MODEL)
    port = free_port()
    server = start_server(port)
    rows, apps = [], []
    try:
        with sync_playwright() as p:
            browser = launch_browser(p, args.browser, browser_cpu)
            print(f"Chromium in the {args.browser} scheduling class"
                  + (f"; the server and the headless engine on CPU {min(os.sched_getaffinity(0))}, Chromium "
                     f"on CPU {browser_cpu}" if args.pin else ""), flush=True)
            with_page(browser, f"http://127.0.0.1:{port}", 2.0, 0, server.pid)   # load the server's model once
            for i in range(args.rounds):
                c = cli(args.warm, args.window) if args.baseline == "cli" else None
                t = time.process_time()
                a = headless(model, args.warm, args.window)
                engine_cpu = (time.process_time() - t) / (args.warm + args.window + 0.5)
                cpu = {}
                b = with_page(browser, f"http://127.0.0.1:{port}", args.warm, args.window,
                              server.pid, cpu)
                rows.append((a, b, c))
                vs_cli = "" if c is None else (f"   cli {c:5.2f} steps/s: headless/cli {a / c:.2f}, "
                                                f"page/cli {b / c:.2f}")
                print(f"round {i + 1}: headless {a:5.2f} steps/s   page open {b:5.2f} steps/s   "
                      f"ratio {b / a:.2f}{vs_cli}   (CPU, cores: headless engine {engine_cpu:.2f}, "
                      f"server {cpu['server']:.2f} = engine threads {cpu['engine']:.2f} + app "
                      f"{cpu['server'] - cpu['engine']:.2f}, Chromium {cpu['browser']:.2f}; "
                      f"refresh interval at the end {cpu['refresh_s']:g} s)", flush=True)
                apps.append(cpu["server"] - cpu["engine"])
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=15)
    ratios = [b / a for a, b, _ in rows]
    print(f"median ratio page/headless: {statistics.median(ratios):.2f} "
          f"(headless median {statistics.median(a for a, _, _ in rows):.2f} steps/s, "
          f"page median {statistics.median(b for _, b, _ in rows):.2f} steps/s)")
    if args.baseline == "cli":
        print(f"against the CLI on the same requests and policy (median of rounds): no viewer (headless) "
              f"{statistics.median(a / c for a, _, c in rows):.2f}, one viewer (page) "
              f"{statistics.median(b / c for _, b, c in rows):.2f} "
              f"(CLI median {statistics.median(c for _, _, c in rows):.2f} steps/s)")
    print(f"the app's own CPU for one viewer (the server process less its engine threads): median "
          f"{statistics.median(apps):.0%} of a core (goal < 15%)")


if __name__ == "__main__":
    main()
