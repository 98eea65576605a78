"""Streamlit glue shared by the lesson lab pages: the measure / re-measure buttons, progress
bars, the "cached result from this machine" note, links that reproduce a lab (each widget drawn
with its range, which also checks its link value), and how numbers, charts and tables are shown.
The Playground uses the safe-text helpers too: `plain` for anything a user or a file supplied,
`error_message` / `errors_shown` so a failure is one clear line on the page, never a traceback.

Pages stay thin: widgets here and in the page; each lab's workload, runs, analysis and figures
in labs/<lab>/experiment.py.
"""
from __future__ import annotations

import logging
import math
import re
from contextlib import contextmanager

import pandas as pd
import streamlit as st

from engine.core import metrics
from ui.estimates import estimate_text  # noqa: F401  (the labs call it as widgets.estimate_text)

PLOT_CONFIG = {"displayModeBar": False}
# Lab charts: the mode bar keeps only "download as PNG" (a learner's own measurement, to keep), and
# shows while the pointer is on the chart: always shown, it covered the end of a title on a phone.
EXPORT_CONFIG = {"displayModeBar": "hover", "displaylogo": False, "modeBarButtonsToRemove": [
    "zoom2d", "pan2d", "select2d", "lasso2d", "zoomIn2d", "zoomOut2d", "autoScale2d", "resetScale2d"],
    "toImageButtonOptions": {"format": "png", "scale": 2}}
log = logging.getLogger("batching_lab")


# ----------------------------------------------------------------------------- safe text


# Every ASCII punctuation mark, except an underscore inside a word (Markdown never reads one
# there as emphasis, and names such as max_num_seqs stay searchable as written).
_MARKDOWN_CHARS = re.compile(r"[!-/:-@\[-^`{-~]|_(?![^\W_])|(?<![^\W_])_")


_AUTOLINK = re.compile(r"(?i)(?<![\w])(?:www(?=\\\.)|(?:https?|ftp|mailto|file|javascript|data)\\:)")


def plain(text) -> str:
    """`text` as it is written, for st.markdown / st.warning / st.error / st.caption / st.toast:
    punctuation is backslash-escaped (so a user's `[x](https://…)` is no link and `![x](…)` no
    image) and line breaks become spaces. Use it for anything a user or a file supplied."""
    escaped = _MARKDOWN_CHARS.sub(lambda m: "\\" + m.group(), " ".join(str(text).split()))
    # The page's Markdown also turns bare web addresses into links (GFM autolinks), escaped or
    # not: a zero-width space after "www" and after a scheme's colon keeps them text.
    return _AUTOLINK.sub(lambda m: m.group() + "&#8203;", escaped)


def without_paths(text: str) -> str:
    """`text` with the folders of any server path cut out: ".../engine/runs/results.py" -> "results.py"."""
    return re.sub(r"/(?:[\w.@+-]+/)+", "", text)


def error_message(what: str, exc: Exception) -> str:
    """A failure as one clear line for the page: `what` and the error's own words, with no
    traceback and no server paths. A refusal (ValueError) already says what was wrong; anything
    else is a fault, so its traceback goes to the server log."""
    if not isinstance(exc, ValueError):
        log.error("%s", what, exc_info=exc)
    words = without_paths(str(exc)) or type(exc).__name__
    text = f"{what}: {plain(words)}"
    return text if isinstance(exc, ValueError) else f"{text} ({type(exc).__name__}; the server log has the details)"


@contextmanager
def errors_shown(what: str):
    """`with errors_shown("Drawing the charts"):` a failure inside becomes an st.error line
    (see error_message) and the page goes on after the block."""
    try:
        yield
    except Exception as exc:    # st.rerun / st.stop are not Exceptions: they pass through
        st.error(error_message(what, exc))


# ----------------------------------------------------------------------------- links
# A lab widget is drawn by one of the functions below, which take its range (lo–hi, or its
# options) once: the same range draws the widget and checks the link value (?key=value) that
# fills it on a session's first run. A value outside the range is clamped onto it, one that is
# not allowed at all keeps the default; write_link says so on the page.

_LINK_PROBLEMS = "link_problems"


def _number_from_link(text: str, default, lo, hi):
    """(value, why it was not taken as written or None) for a slider or number box's link value."""
    allowed = f"{lo:g}–{hi:g}"
    try:
        number = float(text)
    except ValueError:
        return default, f"is not a number in {allowed}"
    if not math.isfinite(number):
        return default, f"is not a finite number in {allowed}"
    whole = all(isinstance(v, int) for v in (default, lo, hi))
    if whole and not number.is_integer():
        return default, f"is not a whole number in {allowed}"
    value = min(max(number, lo), hi)
    value = int(value) if whole else value
    return value, None if value == number else f"is outside {allowed}"


def _option(text: str, options):
    """The option `text` names (by its link spelling, or as an equal number), else None."""
    for option in options:
        if text == str(option):
            return option
        if isinstance(option, (int, float)) and not isinstance(option, bool):
            try:
                if float(text) == option:
                    return option
            except ValueError:
                pass
    return None


def _options_from_link(text: str, default, options):
    allowed = ", ".join(str(o) for o in options)
    if isinstance(default, list):          # a multiselect: "2,4,8"
        items = [x for x in text.split(",") if x != ""]
        kept = [o for x in items if (o := _option(x, options)) is not None]
        if len(kept) == len(items):
            return kept, None
        return kept or default, f"holds values not among {allowed}"
    option = _option(text, options)
    return (default, f"is not one of {allowed}") if option is None else (option, None)


def _bool_from_link(text: str, default):
    low = text.lower()
    if low in ("1", "true", "yes", "on"):
        return True, None
    if low in ("0", "false", "no", "off"):
        return False, None
    return default, "is not 1 or 0"


def _start(key: str, default, value_and_problem) -> None:
    """Give the widget `key` its first value: the link's, if it has one, else `default`."""
    if key in st.session_state:
        return
    value = default
    if key in st.query_params:
        raw = st.query_params[key]
        value, why = value_and_problem(raw)
        if why:
            using = ",".join(str(v) for v in value) if isinstance(value, list) else str(value)
            st.session_state.setdefault(_LINK_PROBLEMS, []).append(
                f"Link value {key}={plain(raw[:80])} {why}: using {using}.")
    st.session_state[key] = list(value) if isinstance(value, list) else value   # never the page's own list


def slider(label: str, lo, hi, default, *, key: str, **kw):
    """st.slider from lo to hi (pass step=, help=, format_func= … as usual)."""
    _start(key, default, lambda text: _number_from_link(text, default, lo, hi))
    return st.slider(label, lo, hi, key=key, **kw)


def number_input(label: str, lo, hi, default, *, key: str, **kw):
    _start(key, default, lambda text: _number_from_link(text, default, lo, hi))
    return st.number_input(label, lo, hi, key=key, **kw)


def choice(widget, label: str, options, default, *, key: str, **kw):
    """`widget` (st.radio, st.select_slider or st.multiselect) over `options`."""
    _start(key, default, lambda text: _options_from_link(text, default, list(options)))
    return widget(label, options, key=key, **kw)


def toggle(label: str, default: bool, *, key: str, **kw):
    _start(key, default, lambda text: _bool_from_link(text, default))
    return st.toggle(label, key=key, **kw)


def write_link(keys) -> None:
    """Put the lab's settings in the address bar, so a copied link reproduces the run, and say
    which link values could not be used as they were."""
    for problem in st.session_state.pop(_LINK_PROBLEMS, []):
        st.warning(problem)
    for key in keys:
        v = st.session_state.get(key)
        if v is None:
            continue
        text = ",".join(str(x) for x in v) if isinstance(v, (list, tuple)) else str(v)
        if st.query_params.get(key) != text:
            st.query_params[key] = text


# ----------------------------------------------------------------------------- showing numbers


def fmt(value, unit: str = "", digits: int = 2, scale: float = 1.0) -> str:
    if value is None or (isinstance(value, float) and (math.isnan(value) or math.isinf(value))):
        return "—"
    return f"{value * scale:,.{digits}f} {unit}".strip()


def difference(new: float, old: float, digits: int, unit: str) -> str:
    """A metric's delta, "+0.17 s": the difference of the two values as they are shown (with
    `digits` decimals), so it is the subtraction a reader does (1.40 - 1.23, not 1.404 - 1.226)."""
    d = float(f"{new:.{digits}f}") - float(f"{old:.{digits}f}")
    return f"{d:+.{digits}f} {unit}".strip()


def seconds(value: float) -> str:
    """A time with two significant digits (whole ones from 10 up), in ms below 0.1 s, so a short
    time beside a long one is not shown as 0.00: "0.24 s", "3.8 ms", "45 ms", "12 s"."""
    if value is None or not math.isfinite(value):
        return "—"
    number, unit = (value * 1000, "ms") if 0 < abs(value) < 0.1 else (value, "s")
    return f"{number:.2g} {unit}" if abs(number) < 10 else f"{number:,.0f} {unit}"


def plural(n, word: str) -> str:
    """"1 token", "2 tokens", "1,024 tokens": a count with its noun."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def changes(cols, rows) -> None:
    """Metrics that show figures going from the first setting of a sweep to its last ("0.64 → 2.81 s"), one
    per column: rows of (label, before, after, help)."""
    for col, (label, before, after, help_text) in zip(cols, rows):
        col.metric(label, f"{before} → {after}", help=help_text)


def plot(fig, key: str | None = None) -> None:
    """A lab chart, with a "download as PNG" button in its corner. Two charts that can be drawn
    alike on one page (both modes of one equal-lengths batch) need a `key` each."""
    st.plotly_chart(fig, config=EXPORT_CONFIG, width="stretch", key=key)


# A request table's columns as its headers say them (the tables of finished requests on the labs)
REQUEST_COLUMNS = {"arrival_s": "arrival (s)", "prompt_tokens": "prompt tokens", "output_tokens": "output tokens",
                   "ttft_s": "TTFT (s)", "tpot_s": "TPOT (s)", "e2e_s": "E2E (s)", "queue_s": "queue (s)"}


def decimals(values) -> int:
    """How many decimals a column of numbers is shown with: whole numbers none, else enough for three
    significant digits of its largest value and two of its smallest (at most three), so 224.526
    tok/s shows as 225 and 0.0038 s beside 0.24 s keeps its digit."""
    v = [abs(float(x)) for x in values if x == x and abs(float(x)) != math.inf]
    if all(x == int(x) for x in v):
        return 0
    nonzero = [x for x in v if x > 0]
    large = 2 - math.floor(math.log10(max(nonzero)))
    small = min(1 - math.floor(math.log10(min(nonzero))), 3)
    return max(0, min(3, max(large, small)))


def table(df: pd.DataFrame, csv: str | None = None, **kw) -> None:
    """A table, each float column shown with decimals() (the CSV keeps every digit); with `csv` (a file
    name without extension) also a button that downloads it as CSV. Pass the values unrounded: a
    value rounded before its column's decimals round it again can differ from a sentence's (3.14452
    rounded to 3.145 showed as 3.15 beside a verdict's 3.14)."""
    formats = {c: st.column_config.NumberColumn(format=f"%.{decimals(df[c])}f")
               for c in df.columns if pd.api.types.is_float_dtype(df[c]) and df[c].notna().any()}
    st.dataframe(df, hide_index=True, width="stretch", column_config=formats | kw.pop("column_config", {}), **kw)
    if csv:
        st.download_button(":material/download: Download as CSV", df.to_csv(index=False).encode(),
                           file_name=f"{csv}.csv", mime="text/csv", key=f"{csv}__csv",
                           help="These numbers as a CSV file, to keep or to compare with another machine.")


def definitions(text: str, with_metrics: bool = True) -> None:
    """The lab's "How these numbers are defined" box: engine.metrics' definitions, then `text`."""
    with st.expander("How these numbers are defined"):
        st.markdown((metrics.DEFINITIONS if with_metrics else "") + text)
