"""The teacher's table: each student's progress by lesson, from the store's class rows. No Streamlit.

A row per student and lesson they did something in (a student who has done nothing yet gets one
row of dashes): whether they marked it read, the predictions they made for its labs and how many
of those came close once revealed, and its quiz: questions answered, and right on the first try.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass

COLUMNS = ("student", "lesson", "read", "predictions made", "revealed", "close", "quiz answered",
           "quiz right first try")


@dataclass(frozen=True)
class LessonInfo:
    id: str
    title: str           # as the table shows it, e.g. "1 · Why batch"
    quiz_questions: int


def class_table(rows: list[dict], lessons: list[LessonInfo], lesson_of: dict[str, str]) -> list[dict]:
    """rows: Store.class_rows(); lesson_of: question id -> lesson id (course/predictions.py)."""
    out = []
    for r in rows:
        mine = []
        for lesson in lessons:
            preds = [p for p in r["predictions"] if lesson_of.get(p[1]) == lesson.id]
            tries = {n: right for (les, n), right in r["first_tries"].items() if les == lesson.id}
            read = lesson.id in r["read"]
            if not (read or preds or tries):
                continue
            revealed = [p for p in preds if p[2]]
            mine.append({"student": r["name"], "lesson": lesson.title, "read": "yes" if read else "no",
                         "predictions made": len(preds), "revealed": len(revealed),
                         "close": sum(p[3] for p in revealed),
                         "quiz answered": f"{len(tries)} of {lesson.quiz_questions}",
                         "quiz right first try": sum(tries.values())})
        out.extend(mine or [{"student": r["name"], "lesson": "—", "read": "—", "predictions made": 0, "revealed": 0,
                             "close": 0, "quiz answered": "—", "quiz right first try": 0}])
    return out


def to_csv(table: list[dict]) -> str:
    """The table as CSV text, the columns in COLUMNS' order. A cell that a spreadsheet would read as a
    formula (a name starting with =, +, - or @) is prefixed with a quote mark."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in table:
        writer.writerow({k: _cell(row[k]) for k in COLUMNS})
    return buf.getvalue()


def _cell(value):
    return "'" + value if isinstance(value, str) and value[:1] in ("=", "+", "-", "@") else value
