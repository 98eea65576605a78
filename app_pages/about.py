"""About: the model, device and dtype this server runs, and a measured step time."""
import platform

import pandas as pd
import streamlit as st
import torch

from ui import session, widgets
from engine.model.runner import fast_paths
from engine.runs.live import engine_threads

PAYS = 1.5     # a batch whose tokens/s is this many times batch 1's "pays"


def batching_words(timed: dict) -> str:
    """What the table says about batching, from its own first and last rows ({batch: ms}, timed)."""
    if len(timed) < 2:
        return ""
    (b0, ms0), (b1, ms1) = min(timed.items()), max(timed.items())
    gain = (b1 / ms1) / (b0 / ms0)
    numbers = (f"From batch {b0} to {b1} a step took ×{ms1 / ms0:.1f} as long and made ×{b1 / b0:g} the tokens: "
               f"×{gain:.1f} the tokens per second.")
    if gain >= PAYS:
        return numbers + " That is why batching pays: one pass over the weights serves every sequence in the batch."
    return numbers + (" Here a bigger batch hardly paid: this machine's steps grew almost as fast as the batch "
                      "(bound by compute, not by reading the weights).")


st.title("About this machine")
model = session.model()
st.markdown(
    f"- **Model**: `{session.model_name()}` — {model.config.num_hidden_layers} layers, hidden size "
    f"{model.config.hidden_size}, context up to {model.max_model_len} tokens\n"
    f"- **Device**: `{model.device}` ({platform.processor() or platform.machine()}, "
    f"{torch.get_num_threads()} torch threads)\n"
    f"- **Dtype**: `{str(model.dtype).replace('torch.', '')}`\n"
    f"- **Fast paths**: {'; '.join(fast_paths(model.device, model.dtype)) or 'none (plain PyTorch ops)'}\n"
    f"- **Engines running on this server**: {engine_threads()}")

st.subheader("Measured step time")
st.caption("A few real decode steps of the engine on this machine, timed once per server start.")
t = session.step_times()
timed = {b: ms for b, ms in t["decode_ms"].items() if ms == ms and ms > 0}     # a step not timed is nan
rows = [{"batch (sequences)": b, "decode step (ms)": ms,
         "tokens/s at this batch": b * 1000 / ms if b in timed else None} for b, ms in t["decode_ms"].items()]
widgets.table(pd.DataFrame(rows))
if t.get("prefill_ms") is not None:
    st.caption(f"Prefill of one {t['prompt_tokens']}-token prompt: {t['prefill_ms']:.1f} ms. "
               f"Measuring took {t['seconds']:.1f} s. " + batching_words(timed))
