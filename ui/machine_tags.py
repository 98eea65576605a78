"""The badge a lesson shows beside a worked-example number: which machine it comes from.

lessons/markers.tag_machines places the badges; this says what each reads, from the number's machine as
course/numbers.machine_of declares it (course/machines.py words it). A number whose machine
nobody declared gets a red badge saying so, and tests/test_lesson_examples.py fails on it. No Streamlit here.
"""
from __future__ import annotations

from course import machines
from course.numbers import machine_of

UNKNOWN = ":red-badge[:material/help: no machine named]"


def badge_for(name: str, short: bool = False, machine_of=machine_of) -> str:
    """The badge of the worked-example number `name`: "" where it comes from no machine (a setting, a
    model's shape), UNKNOWN where none is declared; `short` for a badge beside a single number."""
    machine = machine_of(name)
    if machine is None:
        return UNKNOWN
    if machine == machines.ANY:
        return ""
    return machines.badge(machine, machines.short(machine)) if short else machines.badge(machine)
