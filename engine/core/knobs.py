"""Knobs: every setting a learner can move, declared once, on the dataclass field it sets.

A knob's label, help text, unit, range and choices live in the field's metadata:

    max_num_seqs: int = knob(16, "Batch slots", "The most requests ...", lo=1, hi=64)

Everything else is derived from that one declaration: the CLI flags (engine.cli), the
Playground's widgets, its link (URL) state and its presets (which list only the fields they
change). Adding a knob to SchedulerPolicy or WorkloadSpec is all it takes to see it everywhere.
No Streamlit here.
"""
from __future__ import annotations

import functools
import math
from dataclasses import MISSING, Field, dataclass, field, fields

KNOB = "knob"     # the metadata key


@dataclass(frozen=True, slots=True)
class Knob:
    name: str
    label: str
    help: str
    kind: str                           # "int" | "float" | "bool" | "choice"
    default: object
    lo: float | None = None
    hi: float | None = None
    step: float | None = None
    unit: str = ""
    choices: tuple[str, ...] = ()
    flag: str = ""                      # the CLI flag; "" = derived from the name (--max-num-seqs)
    slider_hi: float | None = None      # a slider's end, where the allowed range is wider than a learner needs

    @property
    def ui_hi(self) -> float | None:
        return self.hi if self.slider_hi is None else self.slider_hi

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def range_text(self) -> str:
        """The allowed values, in words: "1–64", "one of fcfs, sjf", "true or false"."""
        return range_text(self.kind, self.lo, self.hi, self.unit, self.choices)

    def check(self, value) -> None:
        """Raise ValueError naming the field, the value and the allowed range if `value` is not allowed."""
        check_value(self.name, value, self.kind, self.lo, self.hi, self.unit, self.choices)

    def clamp(self, value):
        """`value` (a string from a link, or a number) forced into this knob's range and type.
        A choice outside the list, or text that is not a number, is an error."""
        if self.kind == "bool":
            if isinstance(value, str):
                low = value.lower()
                if low in ("1", "true", "yes", "on"):
                    return True
                if low in ("0", "false", "no", "off"):
                    return False
                raise ValueError(f"{self.name} must be 0 or 1 (got {value!r})")
            return bool(value)
        if self.kind == "choice":
            if value not in self.choices:
                raise ValueError(f"{self.name} must be one of {', '.join(self.choices)} (got {value!r})")
            return self.choices[self.choices.index(value)]     # the choice itself (an enum member)
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"{self.name} is not a finite number (got {value!r})")
        number = min(max(number, self.lo), self.hi)
        return int(round(number)) if self.kind == "int" else number


def range_text(kind: str, lo=None, hi=None, unit: str = "", choices: tuple[str, ...] = ()) -> str:
    """Allowed values in words, for a knob or a request field."""
    if kind == "choice":
        return "one of " + ", ".join(choices)
    if kind == "bool":
        return "true or false"
    return f"{number_text(kind, lo)}–{number_text(kind, hi)}" + (f" {unit}" if unit else "")


def number_text(kind: str, x) -> str:
    """A limit as a person reads it: 49,151 for an int, 0.01 for a float."""
    return f"{x:,}" if kind == "int" else f"{x:g}"


def check_value(name: str, value, kind: str, lo=None, hi=None, unit: str = "",
                choices: tuple[str, ...] = ()) -> None:
    """Raise ValueError naming the field, the value and the allowed range if `value` is not allowed.

    Strict: an "int" must be a Python int (not 4.0, "4" or True), a "float" an int or float, a
    "bool" a real bool, and numbers must be finite.
    """
    if kind == "choice":
        if value not in choices:
            raise ValueError(f"unknown {name} {short(value)}: choose one of {', '.join(choices)}")
        return
    if kind == "bool":
        problem = "" if isinstance(value, bool) else "is not true/false"
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        problem = "is not a number"
    elif not math.isfinite(value):
        problem = "is not finite"
    elif kind == "int" and not isinstance(value, int):
        problem = "is not a whole number"
    elif value < lo:
        problem = f"must be at least {number_text(kind, lo)}"
    elif value > hi:
        problem = f"must be at most {number_text(kind, hi)}"
    else:
        problem = ""
    if problem:
        raise ValueError(f"{name} {problem} (got {short(value)}; allowed {range_text(kind, lo, hi, unit, choices)})")


def short(value, limit: int = 60) -> str:
    """`value` as Python writes it, cut to `limit` characters: a 5,000-token list stays readable."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def knob(default, label: str, help: str, *, lo=None, hi=None, step=None, unit: str = "",
         choices: tuple[str, ...] = (), flag: str = "", slider_hi=None) -> Field:
    """A dataclass field with its knob metadata. The kind comes from the default's type."""
    if choices:
        kind = "choice"
    elif isinstance(default, bool):
        kind = "bool"
    elif isinstance(default, int):
        kind = "int"
    else:
        kind = "float"
    if kind in ("int", "float"):
        assert lo is not None and hi is not None, f"{label}: a numeric knob needs lo and hi"
        step = step if step is not None else (1 if kind == "int" else (hi - lo) / 100)
    meta = dict(label=label, help=help, kind=kind, lo=lo, hi=hi, step=step, unit=unit,
                choices=tuple(choices), flag=flag, slider_hi=slider_hi)
    return field(default=default, metadata={KNOB: meta})


def knobs_of(cls) -> dict[str, Knob]:
    """The knobs a dataclass declares, by field name, in field order (plain fields are skipped)."""
    return dict(_knobs_of(cls))


@functools.lru_cache(maxsize=None)
def _knobs_of(cls) -> dict[str, Knob]:
    """knobs_of, worked out once per class: the engine checks its policy every step."""
    out = {}
    for f in fields(cls):
        meta = f.metadata.get(KNOB)
        if meta is None:
            continue
        default = f.default if f.default is not MISSING else f.default_factory()
        out[f.name] = Knob(name=f.name, default=default, **meta)
    return out


def changes(old: dict, new: dict, names=None) -> list[str]:
    """The settings that differ, in words: ['max_num_seqs 8→2']. Only `names`, if given."""
    return [f"{k} {old[k]}→{new[k]}" for k in (names or old) if old[k] != new[k]]


def check_all(obj) -> None:
    """Every knob of a dataclass instance within its declared range (ValueError otherwise)."""
    for name, k in knobs_of(type(obj)).items():
        k.check(getattr(obj, name))
