"""The classroom's board: everything a viewer sees, built once per refresh and shared.

Building a figure costs far more than showing one, so the feed builds the board once and
every session shows the same objects. Every student has one colour on the batch chart, named in
its legend and on its cells; what differs per student (a small dot on their own cells, "(you)"
in the legend) is an overlay added to a copy of the shared figure, looked up from `cells`, which
is worked out once for every tenant. Times are seconds since the class's run began. The
figures are made ready for the live chart here, once (analysis.figure_json: plain JSON data, then
its text), so a session only sends them (ui.live_chart.show_figure); a student's own dots are the
one part made per session.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis import kv, membership, queue_charts
from analysis.figure_json import ReadyFigure, figure_dict, ready
from analysis.membership import OTHER_HUE
from analysis.style import REQUEST_COLORS, ink_on
from analysis.tables import Tables
from engine.core import metrics

from .names import RESERVED

WINDOW_STEPS = 120            # the batch chart scrolls over this many recent steps
CLASS = "whole class"
BACKGROUND = "background load"     # the server's own load (tenants tenant-a, tenant-b, ...)
TENANT_COLUMNS = ["student", "requests", "waiting", "running", "finished", "TTFT p50 (s)", "TPOT p50 (ms)"]
X_TITLE = "seconds since the class's run began"
OWN_MARK = "your requests (dot)"


@dataclass(frozen=True)
class Board:
    version: int
    tables: Tables                                   # times in seconds since the class's run began
    policy: dict
    load: dict
    figures: dict = field(default_factory=dict)      # name -> figure_dict (shared: copy before changing)
    texts: dict = field(default_factory=dict)        # name -> the same figure as the JSON text every session sends
    tenants: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=TENANT_COLUMNS))
    cells: dict = field(default_factory=dict)         # tenant -> (steps, slots) of its cells in the batch chart
    colors: dict = field(default_factory=dict)        # student -> their colour on every chart

    def membership_for(self, tenant: str) -> dict:
        """The shared batch chart with `tenant`'s own requests marked by a small dot where each of
        their stretches has got to, and their name
        in the legend read "(you)" (a new dict; the shared one is untouched)."""
        fig = self.figures["membership"]
        if not self.has_cells(tenant):
            return fig
        xs, ys = self.cells[tenant]
        ink = ink_on(self.colors.get(tenant, REQUEST_COLORS[OTHER_HUE]))
        xs, ys = last_cells(xs, ys)
        overlay = {"type": "scatter", "mode": "markers", "x": xs, "y": ys, "name": OWN_MARK,
                   "hoverinfo": "skip", "marker": {"symbol": "circle", "size": 7, "color": ink}}
        data = [{**t, "name": f"{tenant} (you)"} if t.get("name") == tenant and t.get("mode") == "markers"
                else t for t in fig["data"]]
        return {**fig, "data": [*data, overlay]}

    def has_cells(self, tenant: str) -> bool:
        """Has `tenant` any requests on the batch chart's window?"""
        return len(self.cells.get(tenant, ((), ()))[0]) > 0

    def batch_chart(self, tenant: str) -> dict | ReadyFigure:
        """What `tenant`'s session sends for the batch chart: the shared text, or, where they have
        requests on it, a copy with their own dots (membership_for)."""
        return self.membership_for(tenant) if self.has_cells(tenant) else self.texts["membership"]


def last_cells(xs, ys) -> tuple[list, list]:
    """The latest cell of each stretch of cells in one row (step x, slot y): one dot a stretch, at
    its newest step, marks a student's requests without covering the grid or the names on it."""
    cells = set(zip(xs, ys))
    lasts = sorted((x, y) for x, y in cells if (x + 1, y) not in cells)
    return [x for x, _ in lasts], [y for _, y in lasts]


def student(tenant: str) -> str:
    """Who a tenant is on the class's charts: the student's name, or the background load."""
    return BACKGROUND if tenant.startswith(RESERVED) else tenant


def on_class_time(tables: Tables, origin_s: float) -> Tables:
    """The tables with every time in seconds since the class's run began (`origin_s`, server time)."""
    steps, requests, marks = tables.steps.copy(), tables.requests.copy(), tables.marks.copy()
    for frame, cols in ((steps, ("t_start_s", "t_end_s")), (marks, ("t_s",)),
                        (requests, ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s"))):
        for col in cols:
            if col in frame.columns:
                frame[col] = pd.to_numeric(frame[col], errors="coerce") - origin_s
    return Tables(steps, requests, marks, tables.retired, tables.counts)


def build(version: int, tables: Tables, policy: dict, load: dict, hue_of: dict | None = None,
          origin_s: float = 0.0) -> Board:
    """The board of one refresh. `hue_of`: each student's palette index, kept by the feed so a
    student keeps their colour; `origin_s`: the server's time when the class's run began."""
    hue_of = hue_of or {}
    tables = on_class_time(tables, origin_s)
    steps, requests, marks = tables.steps, tables.requests, tables.marks
    owners = dict(zip(requests["id"].astype(str), requests["tenant"].astype(str).map(student))) if len(requests) else {}
    slots = int(steps["max_num_seqs"].iloc[-1]) if len(steps) and "max_num_seqs" in steps.columns \
        and steps["max_num_seqs"].iloc[-1] else int(policy.get("max_num_seqs", 1))
    # Drawn as in presenter mode: larger text for a room, and a plot that keeps the chart above
    # the fold at 1280x720 however many slots there are.
    shared = membership.batch_membership(steps, slots, window=WINDOW_STEPS, marks=marks, owners=owners,
                                         owner_hue=hue_of, presenter=True)
    figures = {"membership": figure_dict(shared),
               "queue": figure_dict(_on_class_axis(queue_charts.queue_over_time(steps, marks=marks))),
               "kv": figure_dict(_on_class_axis(kv.kv_usage(steps, marks=marks)))}
    colors = {who: REQUEST_COLORS[h] for who, h in hue_of.items()}
    return Board(version, tables, policy, load, figures, {name: ready(f) for name, f in figures.items()},
                 tenant_table(requests), tenant_cells(shared, requests), colors)


def _on_class_axis(fig: dict) -> dict:
    fig["layout"].setdefault("xaxis", {})["title"] = {"text": X_TITLE}
    return fig


def tenant_cells(fig, requests: pd.DataFrame) -> dict:
    """tenant -> (step numbers, slots) of the cells its requests fill in the batch chart."""
    heat = next((t for t in fig["data"] if t["type"] == "heatmap"), None)
    if heat is None or not len(requests):
        return {}
    tenant_of = dict(zip(requests["id"].astype(str), requests["tenant"].astype(str)))
    labels = np.asarray(heat["text"])                      # (slots, steps): "who · id phase" or "empty slot"
    ids = np.char.rpartition(np.char.rpartition(labels.astype(str), " ")[..., 0], " · ")[..., 2]
    slots, cols = np.nonzero(ids != "")
    x = np.asarray(heat["x"])
    out: dict[str, tuple[list, list]] = {}
    for s, c in zip(slots.tolist(), cols.tolist()):
        tenant = tenant_of.get(ids[s, c])
        if tenant is not None:
            xs, ys = out.setdefault(tenant, ([], []))
            xs.append(int(x[c]))
            ys.append(s)
    return out


def tenant_table(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per student (most requests first), the background load, then the whole class: where
    their requests are now, and TTFT and TPOT medians over finished requests, as the server measured them."""
    if not len(requests):
        return pd.DataFrame(columns=TENANT_COLUMNS)
    who = requests["tenant"].astype(str).map(student)
    rows = [_row(str(t), group) for t, group in requests.groupby(who, sort=False)]
    rows.sort(key=lambda r: (r[0] == BACKGROUND, -r[1]))
    return pd.DataFrame([*rows, _row(CLASS, requests)], columns=TENANT_COLUMNS)


def _row(who: str, group: pd.DataFrame) -> list:
    done = group[group["status"] == metrics.FINISHED]
    return [who, len(group), int((group["status"] == "waiting").sum()), int((group["status"] == "running").sum()),
            len(done), metrics.percentile(done["ttft_s"], 50), 1000 * metrics.percentile(done["tpot_s"], 50)]


def own_counts(last_step, requests: pd.DataFrame, tenant: str) -> tuple[int, int]:
    """(running, waiting): `tenant`'s requests at the end of the board's last step, the moment the
    status line's class counts describe. The request rows are read after the steps, so their own
    status can be some steps newer: "1 of 16 slots running" beside "yours: 8 running"."""
    mine = requests[requests["tenant"].astype(str) == tenant] if len(requests) else requests
    if last_step is None or not len(mine):
        return 0, 0
    # The engine takes in what arrived before a step begins; what arrives during it counts from the next.
    began, t = float(last_step["t_start_s"]), float(last_step["t_end_s"])
    ids = mine["id"].astype(str)
    ended = pd.to_numeric(mine["finish_s"], errors="coerce") <= t
    live = set(ids[(pd.to_numeric(mine["arrival_s"], errors="coerce") <= began) & ~ended])
    running = live & {str(m[0]) for m in last_step["members"]}
    return len(running), len(live - running)


STUDENT_COLUMNS = {"id": "request", "status": "status", "output_tokens": "tokens", "arrival_s": "sent at (s)",
                   "ttft_s": "TTFT (s)", "tpot_s": "TPOT (ms)", "e2e_s": "total (s)"}


def requests_of(requests: pd.DataFrame, tenant: str, n: int = 8) -> pd.DataFrame:
    """One student's latest requests, newest first, in words: human column names, and "—" where a
    value does not exist yet (a request still waiting has no TTFT)."""
    mine = requests[requests["tenant"].astype(str) == tenant].tail(n).iloc[::-1]
    return readable(mine)


def readable(rows: pd.DataFrame) -> pd.DataFrame:
    """Request rows with STUDENT_COLUMNS' names and each value as text ("—" where missing)."""
    out = pd.DataFrame({name: rows[col] if col in rows.columns else None for col, name in STUDENT_COLUMNS.items()})
    fmt = {"sent at (s)": "{:.1f}", "TTFT (s)": "{:.2f}", "TPOT (ms)": "{:.0f}", "total (s)": "{:.2f}", "tokens": "{:.0f}"}
    for name, pattern in fmt.items():
        scale = 1000 if name == "TPOT (ms)" else 1
        out[name] = [pattern.format(float(v) * scale) if metrics.measured(v) else "—"
                     for v in pd.to_numeric(out[name], errors="coerce")]
    out["request"] = ["…" + rid[-8:] if len(rid) > 12 else rid for rid in out["request"].astype(str)]  # ids run long
    return out.reset_index(drop=True)
