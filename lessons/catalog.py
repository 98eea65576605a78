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

__all__ = ["LAB_IDS", "MEASURE", "QuizQuestion", "Shown", "choice_order"]

FOLDER = Path(__file__).parent
TYPE_WORDS = {str: "text", int: "a whole number", list: "a list"}
REQUIRED = {"title": str, "order": int, "summary": str, "labs": list, "glossary": list, "quiz": list}
LINK = re.compile(r"\[([^\]]+)\]\((glossary#|lab:|lesson:)([\w-]+)\)")
KIND = {"glossary#": "glossary", "lab:": "lab", "lesson:": "lesson"}
NUMBER = re.compile(r"\{\{number:(example|lab)\.([\w.]+?)(?::(percent|gain))?\}\}")
PLACE = re.compile(r"\{\{place:(picture|calculator|predict):([\w-]+)\}\}")
BLOCK = re.compile(r"^\{\{place:(picture|calculator):([\w-]+)\}\}[ \t]*$", re.MULTILINE)
MARKER = re.compile(r"\{\{[^{}]*\}\}")
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


@dataclass(frozen=True, slots=True)
class Number:
    source: str          # "example" (course/numbers.py) or "lab" (a lab's code)
    name: str            # example: a name of course/numbers.numbers(); lab: "slo_goodput.SPEC.num_requests"
    style: str = ""      # "" (as written), "percent" (0.3 -> 30%) or "gain" (1.2 -> 20%)

    @property
    def lab(self) -> str:
        """A lab number's lab (or shared labs/<name>.py): "slo_goodput"."""
        return self.name.partition(".")[0]

    @property
    def constant(self) -> str:
        """A lab number's constant with its attributes: "SPEC.num_requests"."""
        return self.name.partition(".")[2]


def find_numbers(text: str, source: str | None = None) -> list[Number]:
    """Every number marker in text (of one source, if given), in order."""
    found = [Number(m.group(1), m.group(2), m.group(3) or "") for m in NUMBER.finditer(text)]
    return [n for n in found if source is None or n.source == source]


def find_example_numbers(text: str) -> list[str]:
    """The names of every worked-example number a text quotes."""
    return [n.name for n in find_numbers(text, "example")]


def unknown_markers(text: str) -> list[str]:
    """Every {{...}} in text that is neither a number nor a placed thing, or a picture or calculator
    that does not stand on a line of its own."""
    on_own_line = {m.start() for m in BLOCK.finditer(text)}
    out = []
    for m in MARKER.finditer(text):
        marker = m.group(0)
        if NUMBER.fullmatch(marker):
            continue
        placed = PLACE.fullmatch(marker)
        if placed and (placed.group(1) == "predict" or m.start() in on_own_line):
            continue
        out.append(marker)
    return out


def written(value, style: str = "") -> str:
    """How a lesson writes a value: 1024 -> "1,024", 2.5 -> "2.5", [1, 2, 4] -> "1, 2 and 4", a text as it is."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        items = [written(v, style) for v in value]
        return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
    if style == "percent":
        value = value * 100
    elif style == "gain":
        value = (value - 1) * 100
    elif style:
        raise ValueError(f"unknown number style {style!r}")
    value = round(float(value), 6)
    text = f"{int(value):,}" if value.is_integer() else f"{value:g}"
    return text + ("%" if style else "")


def lab_value(number: Number):
    """The value a lab number names: a constant of labs/<lab>/experiment.py (or of a shared labs/<name>.py,
    such as knee_rule, or of course/<name>.py, such as the claims table), then attributes, keys or indexes; a dataclass class stands for its defaults
    (SchedulerPolicy.max_wait_ms). Raises ImportError, AttributeError, KeyError or IndexError if there is none."""
    import importlib
    from collections.abc import Mapping as AnyMapping
    from dataclasses import is_dataclass
    labs = FOLDER.parent / "labs"
    value = importlib.import_module(f"labs.{number.lab}.experiment" if (labs / number.lab).is_dir()
                                    else f"labs.{number.lab}" if (labs / f"{number.lab}.py").exists()
                                    else f"course.{number.lab}")      # the claims table: course/claims.py
    for part in number.constant.split("."):
        if isinstance(value, type) and is_dataclass(value):
            value = value()
        if isinstance(value, AnyMapping):
            value = value[part]
        elif part.isdigit() and isinstance(value, (list, tuple)):
            value = value[int(part)]
        else:
            value = getattr(value, part)
    return value


Examples = Union[Mapping[str, object], Callable[[str], object], None]


def render_numbers(text: str, examples: Examples = None) -> str:
    """Number markers replaced by the numbers they stand for, and prediction markers by their questions.
    A lab's number comes from the lab's code; a worked example's from `examples` (course/numbers.numbers()
    for the reader's step model, or a callable from name to value); without it, or for a name it lacks,
    a worked example's number shows as "…". A marker naming nothing that exists is left as it stands."""
    def number(m: re.Match) -> str:
        n = Number(m.group(1), m.group(2), m.group(3) or "")
        if n.source == "lab":
            try:
                return written(lab_value(n), n.style)
            except (ImportError, AttributeError, KeyError, IndexError, TypeError, ValueError):
                return m.group(0)      # shown as it stands; tests/test_lesson_numbers.py names it
        try:
            value = examples.get(n.name) if isinstance(examples, Mapping) else examples(n.name) if examples else None
        except KeyError:
            value = None
        return "…" if value is None else written(value, n.style)

    def placed(m: re.Match) -> str:
        if m.group(1) == "predict" and m.group(2) in ASKS:
            return f"*{ASKS[m.group(2)].render()}*"
        return m.group(0)
    return NUMBER.sub(number, PLACE.sub(placed, text))


BLOCK_BREAK = re.compile(r"\n[ \t]*\n")


def tag_machines(text: str, badge_for: Callable[..., str]) -> str:
    """Each paragraph or table that quotes worked-example numbers, followed by a badge naming the machine
    they come from; where one block quotes numbers of several machines, each of those numbers gets its own
    badge instead. `badge_for(name, short=False)`: the badge of the number `name`'s machine, "" for a
    number of no machine (a setting, a model's shape); ui/machine_tags.badge_for names them (course/
    machines.py). Run before render_numbers."""
    def tag_block(block: str) -> str:
        found = {badge_for(name) for name in find_example_numbers(block)} - {""}
        if not found:
            return block
        if len(found) == 1:
            return f"{block}\n\n{found.pop()}"

        def beside(m: re.Match) -> str:
            if m.group(1) != "example" or not badge_for(m.group(2)):
                return m.group(0)
            return m.group(0) + " " + badge_for(m.group(2), short=True)
        return NUMBER.sub(beside, block)

    return "\n\n".join(tag_block(p) for p in BLOCK_BREAK.split(text))


def find_blocks(text: str, kind: str) -> list[str]:
    """Ids of the pictures (kind "picture") or calculators a text places."""
    return [m.group(2) for m in BLOCK.finditer(text) if m.group(1) == kind]


def find_predictions(text: str) -> list[str]:
    """The question ids of every {{place:predict:<id>}} marker in text."""
    return [m.group(2) for m in PLACE.finditer(text) if m.group(1) == "predict"]


def split_pictures(body: str) -> list[tuple[str, str]]:
    """The body as ("markdown", text), ("picture", id) and ("calculator", id) parts, in order."""
    parts, at = [], 0
    for m in BLOCK.finditer(body):
        if body[at:m.start()].strip():
            parts.append(("markdown", body[at:m.start()]))
        parts.append((m.group(1), m.group(2)))
        at = m.end()
    if body[at:].strip():
        parts.append(("markdown", body[at:]))
    return parts


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
