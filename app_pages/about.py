"""About: the model, device and dtype this server runs, and a measured step time."""
import platform

import streamlit as st
import torch

from ui import session
from engine.model.runner import fast_paths
from engine.runs.live import engine_threads

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
rows = [{"batch (sequences)": b, "decode step (ms)": round(ms, 1),
         "tokens/s at this batch": round(b * 1000 / ms, 1) if ms == ms and ms > 0 else None}
        for b, ms in t["decode_ms"].items()]
st.dataframe(rows, hide_index=True)
if t.get("prefill_ms") is not None:
    st.caption(f"Prefill of one {t['prompt_tokens']}-token prompt: {t['prefill_ms']:.1f} ms. "
               f"Measuring took {t['seconds']:.1f} s. A bigger batch takes a little longer per "
               "step but makes many more tokens: that is why batching pays.")
