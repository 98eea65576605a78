"""Does each Playground preset keep its caption's promise on this machine, with a browser attached?

Starts `streamlit run app.py` (the default model) and Debian's Chromium, then:
1. runs the default workload on the real engine for --warm seconds and reads, every 5 s, the
   step model's current error as the page shows it (predicted against real step times, the median
   over the latest steps: engine/core/step_fit.py);
2. for each preset: a fresh page (so its rate and targets are sized from the refit step model),
   the preset chosen in the sidebar, Start, --run seconds, then the headline's p95 TTFT, p95 TPOT
   and waiting line read off the page beside the preset's targets read off its sliders.

A preset keeps its promise when every target it is meant to meet (Preset.meets) holds at p95,
every one it is meant to miss (Preset.misses) is missed, and, for the presets whose caption says
so, the waiting line stays short. Prints one row per preset. A measurement, not a test.

    .venv/bin/python -m tools.check_presets [--warm 30] [--run 45] [--presets interactive_chat,...]
"""
from __future__ import annotations

import argparse
import os
import re
import time

from playground.presets import PRESETS
from tools import trace_steps
from tools.bench_ui_overhead import free_port, launch_browser, start_server

NEAR_ZERO_WAITING = 3          # "the waiting line stays near zero": at most this many waiting at the end
SAYS_NEAR_ZERO = ("interactive_chat",)


def note_error(page) -> str:
    """The step model's current error as the real engine's note says it ("" before it says)."""
    text = page.locator("[data-testid=stCaptionContainer]", has_text="Real engine.").first.inner_text(timeout=5000)
    found = re.search(r"current error (\d+)% \(median over the last ([\d,]+) steps\)", text)
    return f"{found[1]}% over {found[2]} steps" if found else "not yet"


def load_average() -> str:
    """The machine's load average over 1, 5 and 15 minutes, as `uptime` says it."""
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def status_line(page) -> str:
    return page.locator("[data-testid=stMarkdownContainer] p", has_text="Engine:").first.inner_text(timeout=5000)


def metric(page, label: str) -> str:
    box = page.locator("[data-testid=stMetric]", has=page.locator(f"text='{label}'")).first
    return box.locator("[data-testid=stMetricValue]").inner_text(timeout=10_000)


def seconds(text: str) -> float:
    """'1.23 s' or '456 ms' -> seconds; NaN for '—'."""
    m = re.match(r"([\d.,]+)\s*(ms|s)", text)
    if not m:
        return float("nan")
    value = float(m[1].replace(",", ""))
    return value / 1000 if m[2] == "ms" else value


def link_value(page, name: str) -> float:
    """A knob's value as the page's address holds it (the page writes its whole setup there).
    Read from the page itself: Streamlit rewrites the address in place, which Playwright's
    `page.url` does not follow (it kept the address the page was opened with)."""
    from urllib.parse import parse_qs, urlparse
    return float(parse_qs(urlparse(page.evaluate("window.location.href")).query)[name][-1])


def open_page(browser, url: str):
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.goto(f"{url}/playground")
    page.locator("[data-testid=stMarkdownContainer] p", has_text="Engine:").first.wait_for()
    return context, page


def click(page, name: str) -> None:
    page.get_by_role("button", name=name, exact=True).click()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--warm", type=float, default=30.0, help="seconds of a real run before the presets")
    ap.add_argument("--run", type=float, default=45.0, help="seconds each preset runs")
    ap.add_argument("--presets", default=",".join(PRESETS), help="comma-separated preset ids")
    ap.add_argument("--browser", choices=("idle", "normal"), default="idle",
                    help="Chromium in Linux's idle class (a learner's own machine), or as an equal")
    ap.add_argument("--trace", default="", help="write every step the app's engine takes to this file "
                    "(tools.trace_steps) and print the model's error over the warm-up run from it")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    port = free_port()
    server = start_server(port, args.trace)
    url = f"http://127.0.0.1:{port}"
    try:
        with sync_playwright() as p:
            browser = launch_browser(p, args.browser)
            context, page = open_page(browser, url)
            click(page, "Start")
            t0 = time.monotonic()
            while time.monotonic() - t0 < args.warm:
                time.sleep(5)
                try:
                    steps = re.search(r"steps: ([\d,]+)", status_line(page))
                    print(f"{time.monotonic() - t0:5.0f} s of a real run, {steps[1] if steps else 0} steps: "
                          f"step model error {note_error(page)}", flush=True)
                except Exception as exc:            # the note is being redrawn
                    print(f"{time.monotonic() - t0:5.0f} s: note not read ({type(exc).__name__})", flush=True)
            click(page, "Reset")
            context.close()
            if args.trace:
                print(f"warm-up run, from the trace: {trace_steps.summarize(trace_steps.read(args.trace))} "
                      f"(load average {load_average()})", flush=True)
            if args.presets == "none":
                return
            print(f"\n{'preset':24} {'rate':>6} {'TTFT p95 / target':>20} {'TPOT p95 / target':>22} "
                  f"{'waiting':>8}  model error   promise")
            for pid in args.presets.split(","):
                preset = PRESETS[pid]
                context, page = open_page(browser, url)
                page.locator(".st-key-pg_preset").get_by_role("combobox").click()
                page.get_by_role("option", name=preset.title, exact=True).click()
                time.sleep(2)
                time.sleep(3)                         # the address follows the preset's setup
                rate = link_value(page, "rate")
                ttft_target, tpot_target = link_value(page, "ttft_slo_s"), link_value(page, "tpot_slo_s")
                click(page, "Start")
                time.sleep(args.run)
                ttft, tpot = seconds(metric(page, "TTFT p95")), seconds(metric(page, "TPOT p95"))
                waiting = int(metric(page, "Waiting now").replace(",", ""))
                error = note_error(page)
                held = {"ttft": ttft <= ttft_target, "tpot": tpot <= tpot_target}
                kept = all(held[t] for t in preset.meets) and not any(held[t] for t in preset.misses)
                if pid in SAYS_NEAR_ZERO:
                    kept = kept and waiting <= NEAR_ZERO_WAITING
                print(f"{pid:24} {rate:6.2f} {ttft:8.2f} / {ttft_target:<8.2f} s {1000 * tpot:9.0f} / "
                      f"{1000 * tpot_target:<8.0f} ms {waiting:8d}  {error:12}  {'kept' if kept else 'NOT kept'}"
                      f"  (load average {load_average()})",
                      flush=True)
                click(page, "Reset")
                context.close()
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
