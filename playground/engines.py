"""Which engine a Playground run uses: the real model on this machine, a simulation of one, or
(when the app is attached to one: BATCHING_LAB_ENGINE_URL) a shared Batching Lab server.

A simulated engine is the same Engine and Scheduler on the cost model and a virtual clock
(engine/runs/live.py), its step times predicted by a step model: this machine's calibrated profile
(engine.sim.machine_speed, measured quickly first where it has none), or a roofline model of an
H100 serving Llama-3.1-8B (engine/sim/roofline.py). It runs at `speed` times real time. No Streamlit here.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.sim.machine_speed import machine_speed
from engine.sim.roofline import roofline_profile
from remote import attach

REAL = "real"
CHOICES = {                      # id (in the page's address) -> what the page calls it
    REAL: "real: this machine",
    "sim_machine": "simulated: this machine (calibrated)",
    "sim_h100": "simulated: H100 + Llama-3.1-8B",
}
SERVER = "server"                # the shared server the app is attached to (not in CHOICES: see choices())
H100_PROFILE = "h100-sxm:llama-3.1-8b"
SPEED_MIN, SPEED_MAX, SPEED_DEFAULT = 1, 60, 10     # virtual seconds per wall second


@dataclass(frozen=True, slots=True)
class Seat:
    """A place on a shared server: its address, the tenant this session's requests carry, and
    the instructor token ("" for a learner: policy changes are then refused)."""
    url: str
    tenant: str
    token: str = ""


def server_url() -> str:
    """The Batching Lab server the app is attached to (remote.attach.from_env), or ""."""
    try:
        attached = attach.from_env()
    except ValueError:
        return ""                    # the Classroom and Any engine pages say what is wrong
    return attached.url if attached.kind == "server" else ""


def choices() -> dict[str, str]:
    """CHOICES, plus the shared server when the app is attached to one."""
    url = server_url()
    return CHOICES | ({SERVER: f"shared: the Batching Lab server at {url}"} if url else {})


def step_times(choice: str, model):
    """What predicts a simulated engine's step times (anything with step_ms(plan) and a `label`);
    None for a real engine (this machine's, or the shared server's). `model`: the loaded model,
    whose machine profile is used."""
    if choice in (REAL, SERVER):
        return None
    if choice == "sim_machine":
        return machine_speed(model, measure_if_missing=True).step_model
    if choice == "sim_h100":
        return roofline_profile(H100_PROFILE)
    raise ValueError(f"engine {choice!r} is not one of {', '.join(choices())}")


def sizing_model(choice: str, model):
    """The step model that sizes the presets and the arrival-rate slider for an engine choice: a
    simulated engine's own, else this machine's (the real engine; a shared server's is not known)."""
    return step_times(choice, model) or machine_speed(model, measure_if_missing=True).step_model


def from_query(params: dict) -> tuple[str, int, list[str]]:
    """The engine choice and speed a link holds ('engine', 'speed'), and the problems found;
    a missing or bad value keeps the default."""
    choice, speed, problems = REAL, SPEED_DEFAULT, []
    raw = params.get("engine", REAL)
    raw = raw[-1] if isinstance(raw, list) and raw else raw
    if raw in choices():
        choice = raw
    else:
        problems.append(f"Link value engine={raw} is not one of {', '.join(choices())}: using {REAL}.")
    raw = params.get("speed", str(SPEED_DEFAULT))
    raw = raw[-1] if isinstance(raw, list) and raw else raw
    if str(raw).isdigit() and SPEED_MIN <= int(raw) <= SPEED_MAX:
        speed = int(raw)
    else:
        problems.append(f"Link value speed={raw} is not allowed ({SPEED_MIN}–{SPEED_MAX}): "
                        f"using {SPEED_DEFAULT}.")
    return choice, speed, problems


def to_query(choice: str, speed: int) -> dict[str, str]:
    """The link's part for the engine: nothing for the real engine (links stay as they were)."""
    return {} if choice == REAL else {"engine": choice, "speed": str(speed)}


def simulation_note(cost) -> str:
    """What the page says of a simulated run: whose prediction its step times are, and what it
    leaves out. `cost`: step_times()'s answer, not None."""
    note = (f"Simulated: step times predicted by {cost.label}; generated token ids are stand-ins "
            "(no text), and time runs faster than real time (Simulation speed).")
    device_tokens = getattr(cost, "kv_capacity_tokens", None)   # a roofline model knows its device's
    if device_tokens is not None:
        note += (f" The KV cache is the Playground's (the KV capacity slider), not the "
                 f"{device_tokens:,} tokens this device would hold.")
    return note


def server_note(seat: Seat) -> str:
    """What the page says of a run on the shared server."""
    who = ("With the instructor token, a policy slider you move changes the shared engine for everyone."
           if seat.token else "The policy in effect is the server's (the status line and charts show it); a "
           "policy slider you move changes it only with the instructor token (Engine, in the sidebar).")
    who += " The SLO targets are yours alone: they score what you see."
    return (f"Shared: the Batching Lab server at {seat.url} runs one engine for everyone attached to it. "
            f"The charts show every request it serves; yours are sent as tenant {seat.tenant}. {who} "
            "Pause stops your traffic and freezes your view; the engine goes on for the others.")


def real_note(model) -> str:
    """What the page says of a run on this machine's real engine: the step model its steps refit,
    which sizes the presets and the simulation, and how far off it is now."""
    return (f"Real engine. Every step it takes refits this machine's step model, which sizes the "
            f"presets and the simulated engine: {machine_speed(model, measure_if_missing=True).step_model.label}.")
