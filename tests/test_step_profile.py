"""engine/model/step_profile.py: a step's time split into the runner's parts; the parts add up to the step."""
from engine.model.model import load_model
from engine.model.step_profile import PARTS, format_table, profile_shapes


def test_every_part_is_timed_and_the_parts_add_up_to_the_step():
    rows = profile_shapes(load_model("tiny", device="cpu", dtype="fp32"), reps=1)
    assert [r["shape"] for r in rows] == ["decode b1", "decode b8", "decode b32", "decode b64",
                                          "prefill 1x256", "prefill 8x256", "last 512 of 2048"]
    for r in rows:
        for part in PARTS:
            assert r[part] > 0, f"{r['shape']}: {part} was never timed"
        # the timed parts do not overlap: what is left for Python and gaps is not negative
        assert r["other"] >= 0, r
        assert abs(sum(r[p] for p in (*PARTS, "other")) - r["step_ms"]) < 1e-6
        assert r["engine_ms"] > 0            # the same step as the engine runs it, untimed
    assert rows[0]["tokens"] == 1 and rows[3]["tokens"] == 64 and rows[5]["tokens"] == 2048
    # the last chunk: 512 queries, each seeing the 1,536 keys before the chunk and the chunk's own up to it
    assert rows[6]["tokens"] == 512 and rows[6]["kv_rows"] == 2048
    assert rows[6]["pairs"] == 512 * 1536 + 512 * 513 // 2
    table = format_table(rows, lambda r: 1.0)
    assert len(table.splitlines()) == 1 + len(rows) and "Python & gaps" in table
    in_turn = format_table(rows, lambda r: 1.0, lambda r: r["engine_ms"] / 2)
    assert in_turn.splitlines()[0].endswith("in turn") and all(line.endswith(" 50%") for line in in_turn.splitlines()[1:])
