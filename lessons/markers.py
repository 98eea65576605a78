"""The markers of a lesson's text: a number filled in from code, ``{{number:SOURCE.NAME}}``, and a thing
placed in the text, ``{{place:KIND:ID}}`` (the syntax is described in lessons/catalog.py). Finding them,
refusing any other ``{{...}}``, writing a number's value, placing the machine badges, and splitting a body at
its pictures. No Streamlit here."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Union

from course.predictions import ASKS

LABS = Path(__file__).parent.parent / "labs"      # where a {{number:lab.LAB...}} marker's lab lives
NUMBER = re.compile(r"\{\{number:(example|lab)\.([\w.]+?)(?::(percent|gain))?\}\}")
PLACE = re.compile(r"\{\{place:(picture|calculator|predict):([\w-]+)\}\}")
BLOCK = re.compile(r"^\{\{place:(picture|calculator):([\w-]+)\}\}[ \t]*$", re.MULTILINE)
MARKER = re.compile(r"\{\{[^{}]*\}\}")


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
    labs = LABS
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
    """Each paragraph or table that quotes worked-example numbers is followed by a badge naming the machine
    they come from; consecutive blocks of one machine share one badge, after the last of them (a heading, a
    picture, or a block of another machine ends the run). Where one block quotes numbers of several
    machines, each of those numbers gets its own badge instead. `badge_for(name, short=False)`: the badge
    of the number `name`'s machine, "" for a number of no machine (a setting, a model's shape);
    ui/machine_tags.badge_for names them (course/machines.py). Run before render_numbers."""
    out: list[str] = []
    owed: tuple[str, int] | None = None     # (badge, index in out of the last block that quotes it)

    def settle() -> None:
        nonlocal owed
        if owed is not None:
            out.insert(owed[1] + 1, owed[0])
            owed = None

    def beside(m: re.Match) -> str:
        if m.group(1) != "example" or not badge_for(m.group(2)):
            return m.group(0)
        return m.group(0) + " " + badge_for(m.group(2), short=True)

    for block in BLOCK_BREAK.split(text):
        found = {badge_for(name) for name in find_example_numbers(block)} - {""}
        if block.lstrip().startswith("#") or BLOCK.search(block) or len(found) > 1 or \
                (found and owed is not None and owed[0] not in found):
            settle()
        if len(found) > 1:
            out.append(NUMBER.sub(beside, block))
            continue
        out.append(block)
        if found:
            owed = (found.pop(), len(out) - 1)
    settle()
    return "\n\n".join(out)


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
