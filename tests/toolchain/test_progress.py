"""ninja status lines, the progress display and the output capture around torch's builder."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

from gsnb.toolchain.jit import cpp_extension, stdout_lines, torch_build_environment
from gsnb.toolchain.progress import BuildProgress, step_of


def test_step_lines():
    assert step_of("[1/3] /c/bin/nvcc -c /src/a.cu -o a.cuda.o") == (1, 3, "a.cu")
    assert step_of("[3/3] c++ a.o b.o -shared -o gsnb_csrc_x.so") == (
        3,
        3,
        "linking gsnb_csrc_x.so",
    )
    assert step_of("/src/a.cu(3): warning: unused") is None


def test_progress_counts_steps_and_keeps_every_line():
    log = io.StringIO()
    progress = BuildProgress(log, show=False, verbose=False, jobs=2)
    for line in [
        "[1/2] nvcc -c /s/a.cu -o a.o",
        "a.cu(1): warning #177-D",
        "[2/2] c++ a.o -o m.so",
    ]:
        progress.feed(line)
    progress.close()
    assert progress.steps == (2, 2)
    assert log.getvalue().splitlines()[1] == "a.cu(1): warning #177-D"


def test_child_process_output_reaches_the_reader():
    lines: list[str] = []
    with stdout_lines(lines.append):
        subprocess.run(["echo", "from ninja"], check=True)
        os.write(1, b"from this process\n")
    assert lines == ["from ninja", "from this process"]


def test_torch_build_environment_is_restored():
    module = cpp_extension()
    before = module.CUDA_HOME
    os.environ.pop("GSNB_TEST_VAR", None)
    with torch_build_environment(Path("/opt/cuda-x"), {"GSNB_TEST_VAR": "1"}) as inside:
        assert inside.CUDA_HOME == "/opt/cuda-x" and os.environ["GSNB_TEST_VAR"] == "1"
    assert before == module.CUDA_HOME and "GSNB_TEST_VAR" not in os.environ
