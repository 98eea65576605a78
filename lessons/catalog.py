"""Lesson texts, quizzes and the glossary, loaded from Markdown files in this folder.

A lesson file is ``NN-slug.md``: YAML front matter between two ``---`` lines, then a
Markdown body. Markers inside bodies, which the pages resolve:

- links: ``[TTFT](glossary#ttft)``, ``[the lab](lab:why_batch)``, ``[lesson 4](lesson:latency-metrics)``;
- a number, ``{{number:SOURCE.NAME}}``, filled in from code when the page is drawn:
  ``{{number:lab.slo_goodput.RATES}}`` is ``RATES`` of labs/slo_goodput/experiment.py (or of a shared
  ``labs/<name>.py``), written "1, 2, 4 and 8"; ``{{number:lab.slo_goodput.LOADS:percent}}`` writes
  0.5 as "50%" (``:gain`` writes 1.2 as "20%"); ``{{number:example.static_end_s}}`` is a worked
  example's number, course/numbers.py's ``numbers(step_model)["static_end_s"]``, from the runs on the
  learner's own step model where the example runs on it;
- a thing placed in the text, ``{{place:KIND:ID}}``: a picture or a calculator on a line of its own
  (``{{place:picture:static_vs_continuous}}``, ``{{place:calculator:mm1}}``), or a lab's prediction
  question anywhere in a sentence (``{{place:predict:knee}}``: its text as course/predictions.py declares it,
  the same the lab page asks, with the lab's default settings filled in).

Any other ``{{...}}`` in a body makes the lesson fail to load, naming the marker.

A quiz question's choices each carry ``text`` and, for a wrong choice, ``why`` it is wrong. A question
may open with the learner's own lab measurement: ``measured: {with: "Your run took {knee.knee} ...",
without: "Suppose a run took ...", example: ..., answers: <function>}``; ``{lab.name}`` names a value a lab
page recorded, and the function (course/quiz_answers.py) works out the numbers the choices quote.
No Streamlit here: pages call these functions and decide the URLs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Union

import yaml

from course.quizzes import LAB_IDS, MEASURE, QuizQuestion, Shown, choice_order, parse_quiz
from course.predictions import ASKS
from lessons.markers import BLOCK, Examples, find_predictions, render_numbers, unknown_markers

__all__ = ["LAB_IDS", "MEASURE", "QuizQuestion", "Shown", "choice_order"]

FOLDER = Path(__file__).parent
TYPE_WORDS = {str: "text", int: "a whole number", list: "a list"}
REQUIRED = {"title": str, "order": int, "summary": str, "labs": list, "glossary": list, "quiz": list}
LINK = re.compile(r"\[([^\]]+)\]\((glossary#|lab:|lesson:)([\w-]+)\)")
KIND = {"glossary#": "glossary", "lab:": "lab", "lesson:": "lesson"}
WORDS_PER_MINUTE = 150   # technical text with formulas and tables


@dataclass(slots=True)
class Lesson:
    id: str              # file stem without the "NN-" prefix, e.g. "why-batch"
    path: Path
    title: str
    order: int
    summary: str
    labs: list[str]
    glossary: list[str]
    quiz: list[QuizQuestion]
    body: str

    @property
    def minutes(self) -> int:
        return max(1, round(len(plain_text(self.body).split()) / WORDS_PER_MINUTE))


@dataclass(slots=True)
class LessonError:
    path: Path
    message: str         # names the file and the problem


@dataclass(slots=True)
class GlossaryTerm:
    id: str
    term: str
    definition: str      # Markdown; may hold glossary#/lesson: markers
    see: list[str] = field(default_factory=list)   # lesson ids
    sources: list[str] = field(default_factory=list)   # documentation an outside claim was checked against


@dataclass(slots=True)
class SearchHit:
    title: str
    kind: str            # "lesson" or "glossary"
    id: str
    snippet: str


def find_links(text: str) -> list[tuple[str, str]]:
    """Every link marker in text as (kind, id), kind in glossary/lab/lesson."""
    return [(KIND[m.group(2)], m.group(3)) for m in LINK.finditer(text)]


def plain_text(text: str) -> str:
    """Markers reduced to what a reader sees (pictures and calculators dropped, a worked example's number
    shown as "…": it depends on the reader's step model): for search and word counts."""
    return BLOCK.sub("", render_numbers(LINK.sub(lambda m: m.group(1), text)))


Resolver = Union[Mapping[str, str], Callable[[str], "str | None"], None]


def render_links(body: str, glossary: Resolver, labs: Resolver, lessons: Resolver = None) -> str:
    """Replace link markers with real URLs. Each resolver is a map or a callable from id to
    URL; an id it does not know (None / missing key) leaves the label as plain text."""
    resolvers = {"glossary": glossary, "lab": labs, "lesson": lessons}

    def sub(m: re.Match) -> str:
        label, kind, ident = m.group(1), KIND[m.group(2)], m.group(3)
        r = resolvers[kind]
        url = None if r is None else (r.get(ident) if isinstance(r, Mapping) else r(ident))
        return f"[{label}]({url})" if url else label
    return LINK.sub(sub, body)


def _split_front_matter(text: str) -> tuple[str, str]:
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise ValueError("missing front matter (the file must start with a '---' line)")
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            return "\n".join(lines[1:i]), "\n".join(lines[i + 1:]).strip() + "\n"
    raise ValueError("front matter is not closed by a second '---' line")


def parse_lesson(path: Path) -> Lesson:
    """One lesson file -> Lesson; raises ValueError describing the problem."""
    head, body = _split_front_matter(path.read_text(encoding="utf-8"))
    try:
        meta = yaml.safe_load(head)
    except yaml.YAMLError as e:
        raise ValueError(f"bad YAML in front matter: {e}".replace("\n", " ")) from None
    if not isinstance(meta, dict):
        raise ValueError("front matter is not a mapping of fields")
    for key, typ in REQUIRED.items():
        if key not in meta:
            raise ValueError(f"front matter is missing '{key}'")
        if not isinstance(meta[key], typ) or isinstance(meta[key], bool):
            raise ValueError(f"front matter field '{key}' must be {TYPE_WORDS[typ]}, got {meta[key]!r}")
    if not meta["title"].strip() or not meta["summary"].strip():
        raise ValueError("title and summary must not be empty")
    unknown = [lab for lab in meta["labs"] if lab not in LAB_IDS]
    if unknown:
        raise ValueError(f"unknown lab id(s) {unknown}; known: {LAB_IDS}")
    if not meta["quiz"]:
        raise ValueError("quiz has no questions")
    if not body.strip():
        raise ValueError("lesson body is empty")
    wrong = unknown_markers(body)
    if wrong:
        raise ValueError(f"unknown marker(s) {wrong}: a number is {{{{number:example.NAME}}}} or "
                         f"{{{{number:lab.LAB.CONSTANT}}}}, a placed thing {{{{place:picture|calculator|predict:ID}}}} "
                         f"(a picture or calculator on a line of its own)")
    unknown_asks = [a for a in find_predictions(body) if a not in ASKS]
    if unknown_asks:
        raise ValueError(f"unknown prediction question(s) {unknown_asks}; known: {sorted(ASKS)}")
    lesson_id = re.sub(r"^\d+-", "", path.stem)
    return Lesson(id=lesson_id, path=path, title=meta["title"].strip(),
                  order=meta["order"], summary=meta["summary"].strip(), labs=list(meta["labs"]),
                  glossary=[str(g) for g in meta["glossary"]], quiz=parse_quiz(meta["quiz"], lesson_id), body=body)


def load_lessons(folder: Path | str = FOLDER) -> tuple[list[Lesson], list[LessonError]]:
    """All NN-*.md lessons in folder, sorted by order; broken files become LessonErrors."""
    lessons, errors, seen = [], [], set()
    for path in sorted(Path(folder).glob("[0-9]*-*.md")):
        try:
            lesson = parse_lesson(path)
            if lesson.id in seen:
                raise ValueError(f"duplicate lesson id '{lesson.id}'")
        except (OSError, UnicodeDecodeError, ValueError) as e:
            errors.append(LessonError(path, f"{path.name}: {e}"))
            continue
        seen.add(lesson.id)
        lessons.append(lesson)
    return sorted(lessons, key=lambda l: (l.order, l.id)), errors


HEADING = re.compile(r"^##\s+(.+?)\s*\{#([\w-]+)\}\s*$")


def load_glossary(path: Path | str = FOLDER / "glossary.md", examples: Examples = None) -> dict[str, GlossaryTerm]:
    """Terms from '## Term {#id}' headings; a 'See:' line lists lesson: links, a 'Source:' line the
    documentation an outside claim in the definition was checked against. A definition quotes a worked
    example's number only if it is a setting, the same on every machine (`examples`: course/numbers.setting)."""
    if examples is None:
        from course.numbers import setting as examples
    path = Path(path)
    terms: dict[str, GlossaryTerm] = {}
    current: GlossaryTerm | None = None
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("## "):
            m = HEADING.match(line)
            if not m:
                raise ValueError(f"{path.name}:{n}: heading needs an id, like '## Term {{#id}}'")
            if m.group(2) in terms:
                raise ValueError(f"{path.name}:{n}: duplicate glossary id '{m.group(2)}'")
            current = terms[m.group(2)] = GlossaryTerm(m.group(2), m.group(1), "")
        elif current is not None and line.strip().lower().startswith("see:"):
            current.see += [i for k, i in find_links(line) if k == "lesson"]
        elif current is not None and line.strip().lower().startswith("source:"):
            current.sources.append(line.strip()[len("source:"):].strip())
        elif current is not None:
            current.definition += line + "\n"
    for t in terms.values():
        wrong = unknown_markers(t.definition)
        if wrong:
            raise ValueError(f"{path.name}: term '{t.id}' has unknown marker(s) {wrong}")
        t.definition = render_numbers(t.definition.strip(), examples)
        if not t.definition:
            raise ValueError(f"{path.name}: term '{t.id}' has no definition")
    return terms


def _snippet(text: str, query: str, width: int = 70) -> str:
    flat = " ".join(plain_text(text).split())
    i = flat.lower().find(query.lower()) if query else -1
    if i < 0:
        return flat[:2 * width] + ("…" if len(flat) > 2 * width else "")
    start, end = max(0, i - width), min(len(flat), i + len(query) + width)
    return ("…" if start else "") + flat[start:end] + ("…" if end < len(flat) else "")


def search(query: str, lessons: list[Lesson], glossary: Mapping[str, GlossaryTerm]) -> list[SearchHit]:
    """Case-insensitive search. Glossary term names first, then lesson titles, then body text."""
    q = query.strip().lower()
    if len(q) < 2:
        return []
    ranked: dict[tuple[str, str], tuple[tuple, SearchHit]] = {}

    def add(rank: tuple, hit: SearchHit) -> None:
        key = (hit.kind, hit.id)
        if key not in ranked or rank < ranked[key][0]:
            ranked[key] = (rank, hit)

    for t in glossary.values():
        name = t.term.lower()
        if q in name or q == t.id:
            add((0, name != q and t.id != q, not name.startswith(q), t.term.lower()),
                SearchHit(t.term, "glossary", t.id, _snippet(t.definition, "")))
        elif q in plain_text(t.definition).lower():
            add((2, 1, 0, t.term.lower()), SearchHit(t.term, "glossary", t.id, _snippet(t.definition, q)))
    for l in lessons:
        if q in l.title.lower():
            add((1, 0, l.order, ""), SearchHit(l.title, "lesson", l.id, l.summary))
        elif q in l.summary.lower() or q in plain_text(l.body).lower():
            where = l.summary if q in l.summary.lower() else l.body
            add((2, 0, l.order, ""), SearchHit(l.title, "lesson", l.id, _snippet(where, q)))
    return [hit for _, hit in sorted(ranked.values(), key=lambda rh: rh[0])]
