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


def test_metric_lines_are_made_once_and_written_as_before(tmp_path, make_scene):
    from gsnb.train import TrainConfig, Trainer
    from gsnb.train.metrics_file import METRICS_NAME, MetricLines, metrics_line, write_metrics

    lines = MetricLines()
    a, twin = StepMetrics(step=1, loss=0.5), StepMetrics(step=1, loss=0.5)
    assert lines(a) is lines(a) and lines(twin) == lines(a) and json.loads(lines(a))["loss"] == 0.5
    # A trainer's file: the lines made as each step was counted, as plain serialisation makes them.
    trainer = Trainer(make_scene(), TrainConfig(steps=5, out_dir=str(tmp_path / "run")))
    trainer.run()
    written = (tmp_path / "run" / METRICS_NAME).read_text()
    assert written == "".join(metrics_line(m) for m in trainer.history)
    assert trainer.write_metrics(tmp_path / "again").read_text() == written
    (tmp_path / "plain").mkdir()
    plain = write_metrics(tmp_path / "plain", trainer.history, 0).read_text()
    assert plain == written and len(written.splitlines()) == 5
