"""Which machine a number comes from, said the same way on every page.

A learner meets numbers from several machines, often on one page: this machine's real engine, this
machine's step model on the simulator, the course's recorded step model of a small CPU, and named
GPUs' roofline models. Every number shown says which, with the words and the badge made here:

- a lab's result: `source_label(source, calibrated)` ("Measured on this machine's engine", "Simulated on
  this machine's step model", or, where this machine has no profile, "Simulated on a guessed step model:
  this machine is not calibrated yet"), beside the prediction it answers and in its claim's verdict;
- a lesson's worked-example number (``{{number:example.NAME}}``): its machine is declared in
  course/numbers.py (`machine_of`), and lessons/catalog.py's `tag_machines` places a badge
  after each paragraph or table that quotes one (one badge when the block's numbers share a machine,
  a badge beside each number when they do not).

No Streamlit here: a badge is Markdown that Streamlit draws (``:gray-badge[...]``).
"""
from __future__ import annotations

ENGINE = "engine"            # this machine's real engine, measured
SIMULATOR = "simulator"      # this machine's step model (its calibrated profile, or the guess), on the simulator
RECORD = "record"            # the course's recorded step model of a two-core CPU (course/examples.COURSE_MODEL)
SUPPOSED_1 = "supposed-1"    # lesson 1's sums on a supposed bandwidth and peak (course_numbers.EX1_*)
SUPPOSED_3 = "supposed-3"    # lesson 3's sums on a supposed machine (course_numbers.EX3_*)
ANY = "any"                  # no machine: a setting, a count of the scheduler's or a model's shape

SOURCE_LABEL = {"measured": "Measured on this machine's engine",
                "simulated": "Simulated on this machine's step model",
                "guessed": "Simulated on a guessed step model: this machine is not calibrated yet"}
_WORDS = {ENGINE: "this machine's engine", SIMULATOR: "this machine's simulator",
          RECORD: "recorded 2-core CPU (SmolLM2-135M, fp32), simulated",
          SUPPOSED_1: "a supposed machine (its bandwidth and peak named in the text)",
          SUPPOSED_3: "a supposed machine (its peak and step named in the text)"}


def words(machine: str) -> str:
    """The machine in a few words: one of the kinds above, or a roofline profile's name
    ("a100-80gb:llama-3.1-8b" -> "A100 80GB SXM roofline, Llama-3.1-8B, simulated")."""
    if machine in _WORDS:
        return _WORDS[machine]
    from engine.sim.roofline import DEVICES, MODELS
    device, _, model = machine.partition(":")
    if device in DEVICES and model in MODELS:
        return f"{DEVICES[device].name} roofline, {MODELS[model].name}, simulated"
    raise ValueError(f"no machine named {machine!r}: one of {', '.join(_WORDS)} or DEVICE:MODEL of the roofline")


def source_label(source: str, calibrated: bool) -> str:
    """A lab result's label: `source` "measured" (this machine's engine) or "simulated" on this machine's
    step model, where `calibrated` says whether that model was measured here (engine.sim.machine_speed's
    kind): a simulation on the hand-set guess never calls itself this machine's."""
    if source == "measured":
        return SOURCE_LABEL["measured"]
    return SOURCE_LABEL["simulated" if calibrated else "guessed"]


def roofline_label(profile: str) -> str:
    """A result simulated on a named GPU's roofline model ("l4:llama-3.1-8b"), not on this machine."""
    return "Simulated on the " + words(profile).removesuffix(", simulated")


def short(machine: str) -> str:
    """The machine in a word or two, for a badge beside one number."""
    if machine in (SUPPOSED_1, SUPPOSED_3):
        return "supposed machine"
    if machine == RECORD:
        return "recorded CPU"
    if machine in _WORDS:
        return _WORDS[machine]
    from engine.sim.roofline import DEVICES
    return DEVICES[machine.partition(":")[0]].name.split(" ")[0] + " roofline"


def badge(machine: str, text: str | None = None) -> str:
    """The uniform visible mark: a grey badge with a chip icon naming the machine."""
    shown = (text or words(machine)).replace("[", "(").replace("]", ")")
    return f":gray-badge[:material/memory: {shown}]"
