"""Lesson texts, quizzes and the glossary, loaded from Markdown files in this folder.

A lesson file is ``NN-slug.md``: YAML front matter between two ``---`` lines, then a
Markdown body. Links inside bodies are markers the pages resolve:
``[TTFT](glossary#ttft)``, ``[the lab](lab:why_batch)``, ``[lesson 4](lesson:latency-metrics)``.
No Streamlit here: pages call these functions and decide the URLs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Union

import yaml

from ui.registry import LABS

FOLDER = Path(__file__).parent
LAB_IDS = [lab.url_path for lab in LABS]   # what `lab:<id>` links may name
TYPE_WORDS = {str: "text", int: "a whole number", list: "a list"}
REQUIRED = {"title": str, "order": int, "summary": str, "labs": list, "glossary": list, "quiz": list}
LINK = re.compile(r"\[([^\]]+)\]\((glossary#|lab:|lesson:)([\w-]+)\)")
KIND = {"glossary#": "glossary", "lab:": "lab", "lesson:": "lesson"}
WORDS_PER_MINUTE = 150   # technical text with formulas and tables


@dataclass(slots=True)
class QuizQuestion:
    question: str
    choices: list[str]
    answer: int          # index into choices of the single right choice
    explanation: str


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
    """Link markers reduced to their labels: for search and word counts."""
    return LINK.sub(lambda m: m.group(1), text)


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


def _quiz(items: list) -> list[QuizQuestion]:
    out = []
    for n, q in enumerate(items, 1):
        if not isinstance(q, dict):
            raise ValueError(f"quiz question {n} is not a mapping")
        missing = [k for k in ("question", "choices", "answer", "explanation") if k not in q]
        if missing:
            raise ValueError(f"quiz question {n} is missing {', '.join(missing)}")
        choices, answer = q["choices"], q["answer"]
        if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) and c.strip() for c in choices):
            raise ValueError(f"quiz question {n}: choices must be a list of at least two non-empty strings")
        if len(set(choices)) != len(choices):
            raise ValueError(f"quiz question {n}: choices are not unique")
        if isinstance(answer, bool) or not isinstance(answer, int):
            raise ValueError(f"quiz question {n}: answer must be exactly one choice index, got {answer!r}")
        if not 0 <= answer < len(choices):
            raise ValueError(f"quiz question {n}: answer {answer} is out of range 0..{len(choices) - 1}")
        if not str(q["question"]).strip() or not str(q["explanation"]).strip():
            raise ValueError(f"quiz question {n}: question and explanation must not be empty")
        out.append(QuizQuestion(str(q["question"]).strip(), [c.strip() for c in choices], answer,
                                str(q["explanation"]).strip()))
    return out


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
    return Lesson(id=re.sub(r"^\d+-", "", path.stem), path=path, title=meta["title"].strip(),
                  order=meta["order"], summary=meta["summary"].strip(), labs=list(meta["labs"]),
                  glossary=[str(g) for g in meta["glossary"]], quiz=_quiz(meta["quiz"]), body=body)


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


def load_glossary(path: Path | str = FOLDER / "glossary.md") -> dict[str, GlossaryTerm]:
    """Terms from '## Term {#id}' headings; a 'See:' line lists lesson: links."""
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
        elif current is not None:
            current.definition += line + "\n"
    for t in terms.values():
        t.definition = t.definition.strip()
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
