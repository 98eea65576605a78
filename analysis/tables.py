"""A live run's snapshots as the tables the chart builders take, and as the CLI's CSV files.

Steps never change once recorded, so their rows are converted once and kept: a refresh
converts only the steps taken since the last one, and drops the rows of steps that left the
live run's window. Requests still running change every step
and are read fresh from each snapshot. Step members stay (request id, phase, tokens) tuples
in the tables; they become "id:phase:n" text only in steps.csv. No Streamlit here.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field

import pandas as pd

from engine.core.metrics import LIVE_REQUEST_COLUMNS, REQUEST_COLUMNS, STEP_COLUMNS, Counts, Retired, step_row
from engine.runs.run_files import step_csv_row, write_csv

# One row per change mark (engine.core.engine.PolicyMark): the short label drawn on the charts,
# every change for the hover, and the names of the knobs changed.
MARK_COLUMNS = ["step", "t_s", "label", "detail", "knobs"]


def marks_table(marks) -> pd.DataFrame:
    """PolicyMarks, oldest first, as the marks table."""
    rows = [(m.step, m.t_s, m.label, m.detail or m.label, tuple(m.knobs)) for m in marks]
    return pd.DataFrame(sorted(rows, key=lambda row: row[1]), columns=MARK_COLUMNS)


@dataclass(frozen=True, slots=True)
class Tables:
    steps: pd.DataFrame       # STEP_COLUMNS (steps.csv)
    requests: pd.DataFrame    # LIVE_REQUEST_COLUMNS: requests.csv's + TPOT so far and the text so far
    marks: pd.DataFrame       # MARK_COLUMNS: policy and workload changes
    retired: Retired = field(default_factory=Retired)   # a live run's counts beyond its window
    counts: Counts | None = None   # the whole run's requests now (None: read them off the latest step)

    def now(self) -> Counts:
        """Where every request that has arrived is now: the snapshot's counts, else the latest step's."""
        if self.counts is not None:
            return self.counts
        return Counts() if len(self.steps) == 0 else Counts.of_step(self.steps.iloc[-1])


class TraceTables:
    def __init__(self):
        self._first = self._next = 0     # step numbers held: first, ..., next - 1
        self._steps = pd.DataFrame({c: [] for c in STEP_COLUMNS})

    def steps(self, records) -> pd.DataFrame:
        """The steps table for a snapshot's step records: consecutive steps of one run, the
        latest ones (a live run keeps a window)."""
        if not records or records[0].step < self._first or records[-1].step < self._next - 1:
            self.__init__()               # a different (reset) run: start over
            if not records:
                return self._steps
        first, nxt = records[0].step, records[-1].step + 1
        if (first, nxt) != (self._first, self._next):
            # The rows held, less those that left the window, then the new steps' rows: a refresh
            # converts only the new steps and copies the rest as whole columns.
            kept = self._steps.iloc[min(max(0, first - self._first), len(self._steps)):]
            added = pd.DataFrame([step_row(rec) for rec in records[max(0, self._next - first):]],
                                 columns=STEP_COLUMNS)
            parts = [part for part in (kept, added) if len(part)]    # an empty piece would make every column object
            self._steps = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].reset_index(drop=True)
            self._first, self._next = first, nxt
        return self._steps

    def update(self, snapshot) -> Tables:
        requests = pd.DataFrame.from_records(list(snapshot.requests),
                                             columns=LIVE_REQUEST_COLUMNS)
        return Tables(self.steps(snapshot.steps), requests, marks_table(snapshot.marks),
                      snapshot.retired, snapshot.counts)


class StreamTables:
    """A server's live run as Tables, read through a remote.lab_stream.LabStream (handed in: analysis
    imports no HTTP client). Counts are the latest step's."""

    def __init__(self, stream):
        self.stream = stream
        self._tables = TraceTables()
        self._run = None

    def poll(self) -> Tables:
        rows, marks = self.stream.read()
        if self.stream.run != self._run:     # a reset: the rows held are the old run's, whatever their step numbers
            self._tables, self._run = TraceTables(), self.stream.run
        requests = pd.DataFrame.from_records(rows, columns=LIVE_REQUEST_COLUMNS)
        return Tables(self._tables.steps(list(self.stream.steps)), requests, marks_table(marks))


def _csv(rows, columns) -> str:
    buf = io.StringIO()
    write_csv(buf, rows, columns)
    return buf.getvalue()


def requests_csv(snapshot) -> str:
    """requests.csv exactly as `python -m engine run` writes it."""
    return _csv(snapshot.requests, REQUEST_COLUMNS)


def steps_csv(snapshot) -> str:
    """steps.csv exactly as `python -m engine run` writes it."""
    return _csv((step_csv_row(s) for s in snapshot.steps), STEP_COLUMNS)
