"""gsnb.train.metrics: a step's record as plain types."""

from __future__ import annotations

import dataclasses
import json

from gsnb.train.metrics import StepMetrics


def test_to_dict_is_asdict_and_shares_nothing_mutable():
    m = StepMetrics(
        step=7, loss=0.25, psnr=31.5, num_gaussians=1200, gpu_memory=None, view="a.png",
        events={"cloned": 3, "pruned": 1}, warnings=["scales grow"],
    )  # fmt: skip
    out = m.to_dict()
    assert out == dataclasses.asdict(m)
    assert list(out) == [f.name for f in dataclasses.fields(StepMetrics)]
    out["events"]["cloned"] = 0
    out["warnings"].append("x")
    assert m.events == {"cloned": 3, "pruned": 1} and m.warnings == ["scales grow"]
    assert json.loads(json.dumps(m.to_dict()))["events"] == {"cloned": 3, "pruned": 1}
