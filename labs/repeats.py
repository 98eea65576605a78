"""Repeated runs: a measurement on a busy machine is noisy, so the labs that time the engine run
each setting REPEATS times (different seeds: different draws of the same workload, and fresh
timings) and draw the mean with the range of the runs as error bars. No Streamlit."""
from __future__ import annotations

import pandas as pd

REPEATS = 3


def spread(rows: pd.DataFrame, by: str, columns: list[str]) -> pd.DataFrame:
    """One row per value of `by`: for each column its mean, and its lowest and highest run as
    `<column>_lo` / `<column>_hi`; `runs` counts the runs behind each row."""
    g = rows.groupby(by, sort=True)
    out = g[columns].mean()
    for c in columns:
        out[f"{c}_lo"] = g[c].min()
        out[f"{c}_hi"] = g[c].max()
    out["runs"] = g.size()
    return out.reset_index()


def error_bars(table: pd.DataFrame, column: str, scale: float = 1.0) -> dict | None:
    """Plotly error bars from a spread() table: the range of the runs around their mean."""
    if f"{column}_lo" not in table or (table["runs"] < 2).all():
        return None
    return dict(type="data", symmetric=False, thickness=1.5, width=5,
                array=(table[f"{column}_hi"] - table[column]) * scale,
                arrayminus=(table[column] - table[f"{column}_lo"]) * scale)
