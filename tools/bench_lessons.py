"""How long a lesson page takes in Chromium: its first load, and a quiz check.

Starts `streamlit run app.py` on a free port (as `make run` does, file watcher on), then for each
round opens a fresh browser context (a new session) on each lesson given, and times:

- load: from navigation until the page's last element (the "Mark as read" button) is drawn and
  the app has stopped running;
- check: from clicking a question's Check until its verdict (right or wrong) shows; every question
  of the page is checked, twice each with a different choice (`--checks` times in all).

The first round after the server starts also pays for the process's one-off work (imports,
pictures drawn once per process), so it is printed apart from the later rounds.

    .venv/bin/python -m tools.bench_lessons --rounds 3 --lessons why-batch queueing
    .venv/bin/python -m tools.bench_lessons --root /tmp/before    # another checkout's app, same browser
"""
from __future__ import annotations

import argparse
import statistics
import time

from playwright.sync_api import sync_playwright

from pathlib import Path

from tests import test_browser
from tests.test_browser import ARGS, CHROMIUM, app_server

LESSONS = ("why-batch", "static-vs-continuous", "queueing", "two-schedulers")


def idle(page, timeout_s: float = 60) -> None:
    """Wait until Streamlit says the script is not running (its status widget is gone)."""
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')",
                           timeout=timeout_s * 1000)


def load(page, url: str) -> float:
    t = time.perf_counter()
    page.goto(url)
    page.get_by_role("button", name="Mark as read").wait_for(timeout=60_000)
    page.get_by_role("button", name="Check").first.wait_for(timeout=60_000)
    idle(page)
    return time.perf_counter() - t


def check(page, k: int) -> float:
    """Pick a choice of question k % n (another one each time round) and time its Check."""
    radios = page.locator("[data-testid='stRadio']")
    n = radios.count()
    question = radios.nth(k % n)
    question.locator("label").nth((k // n) % 2).click()
    idle(page)
    box = question.locator("xpath=ancestor::div[@data-testid='stVerticalBlock'][1]")   # its bordered box
    t = time.perf_counter()
    page.get_by_role("button", name="Check").nth(k % n).click()
    box.locator("[data-testid='stAlert']").first.wait_for(timeout=60_000)
    idle(page)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lessons", nargs="+", default=list(LESSONS))
    ap.add_argument("--checks", type=int, default=6, help="checks timed on each page load")
    ap.add_argument("--root", default=None, help="serve the app of this checkout (default: this one)")
    args = ap.parse_args()
    if args.root:
        test_browser.ROOT = Path(args.root)
    with app_server(watch_files=True) as (url, _log), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        times = {"load": [], "check": []}
        for r in range(args.rounds):
            for lesson in args.lessons:
                ctx = browser.new_context(viewport={"width": 1280, "height": 720})
                page = ctx.new_page()
                lt = load(page, f"{url}/lesson-{lesson}")
                cts = [check(page, k) for k in range(args.checks)]
                ctx.close()
                print(f"round {r + 1} {lesson:22s} load {lt:5.2f} s  checks " + " ".join(f"{c:.2f}" for c in cts),
                      flush=True)
                if r > 0 or lesson != args.lessons[0]:
                    times["load"].append(lt)
                times["check"].extend(cts)
        browser.close()
    for name, ts in times.items():
        if ts:
            print(f"{name}: median {statistics.median(ts):.2f} s, max {max(ts):.2f} s over {len(ts)}"
                  + (" (the server's very first page left out)" if name == "load" else ""))


if __name__ == "__main__":
    main()
