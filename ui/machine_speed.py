"""This machine's step model as a page reads it: engine/sim/machine_speed.py for the app's model, under a
spinner (the first read imports torch and checks the profile against this machine and code)."""
from __future__ import annotations

import streamlit as st

from engine.sim.machine_speed import MachineSpeed, machine_speed


def here() -> MachineSpeed:
    """This machine's step model of the app's model, its kind (calibrated here, or the hand-set guess) and
    its current error. Measures nothing: the Playground measures a missing profile on its first run."""
    from ui.session import model_name     # it imports torch
    with st.spinner("Reading this machine's step model…"):
        return machine_speed(model_name())
