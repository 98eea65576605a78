"""The classroom's board: everything a viewer sees, built once per refresh and shared.

Building a figure costs far more than showing one, so the feed builds the board once and
every session shows the same objects. What differs per student (their own cells outlined
in the batch chart, their row marked in the table) is a small overlay added to a copy of
the shared figure, looked up from `cells`, which is worked out once for every tenant. The
figures are made ready for the live chart here, once (analysis.figure_json), so a session only draws
them (ui.live_chart.show_figure).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis import kv, membership, queue
from analysis.figure_json import figure_dict
from analysis.tables import Tables
from engine import metrics

WINDOW_STEPS = 120            # the batch chart scrolls over this many recent steps
CLASS = "whole class"
TENANT_COLUMNS = ["who", "requests", "in flight", "finished", "TTFT p50 (s)", "TPOT p50 (s)"]


@dataclass(frozen=True)
class Board:
    version: int
    tables: Tables
    policy: dict
    load: dict
    figures: dict = field(default_factory=dict)      # name -> figure ready to show (analysis.figure_json; shared: copy before changing)
    tenants: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=TENANT_COLUMNS))
    cells: dict = field(default_factory=dict)         # tenant -> (steps, slots) of its cells in the batch chart

    def membership_for(self, tenant: str) -> dict:
        """The shared batch chart with `tenant`'s own cells outlined (a new dict; the shared one is untouched)."""
        fig = self.figures["membership"]
        xs, ys = self.cells.get(tenant, ((), ()))
        if not len(xs):
            return fig
        overlay = {"type": "scatter", "mode": "markers", "x": list(xs), "y": list(ys), "name": "your requests",
                   "hoverinfo": "skip", "marker": {"symbol": "square-open", "size": 11, "color": "black",
                                                   "line": {"width": 2}}}
        return {**fig, "data": [*fig["data"], overlay]}


def build(version: int, tables: Tables, policy: dict, load: dict) -> Board:
    steps, requests, marks = tables.steps, tables.requests, tables.marks
    shared = membership.batch_membership(steps, int(policy.get("max_num_seqs", 1)), window=WINDOW_STEPS, marks=marks)
    figures = {"membership": figure_dict(shared),
               "queue": figure_dict(queue.queue_over_time(steps, marks=marks)),
               "kv": figure_dict(kv.kv_usage(steps, marks=marks))}
    return Board(version, tables, policy, load, figures, tenant_table(requests), tenant_cells(shared, requests))


def tenant_cells(fig, requests: pd.DataFrame) -> dict:
    """tenant -> (step numbers, slots) of the cells its requests fill in the batch chart."""
    heat = next((t for t in fig["data"] if t["type"] == "heatmap"), None)
    if heat is None or not len(requests):
        return {}
    tenant_of = dict(zip(requests["id"].astype(str), requests["tenant"].astype(str)))
    labels = np.asarray(heat["text"])                      # (slots, steps): "id phase" or "empty slot"
    ids = np.char.rpartition(labels.astype(str), " ")[..., 0]
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
    """One row per tenant (most requests first), then the whole class: TTFT and TPOT medians
    over finished requests, as the server measured them."""
    if not len(requests):
        return pd.DataFrame(columns=TENANT_COLUMNS)
    rows = [_row(str(t), group) for t, group in requests.groupby("tenant", sort=False)]
    rows.sort(key=lambda r: -r[1])
    return pd.DataFrame([*rows, _row(CLASS, requests)], columns=TENANT_COLUMNS)


def _row(who: str, group: pd.DataFrame) -> list:
    done = group[group["status"] == metrics.FINISHED]
    return [who, len(group), int(group["status"].isin(("waiting", "running")).sum()), len(done),
            metrics.percentile(done["ttft_s"], 50), metrics.percentile(done["tpot_s"], 50)]
