"""Ship the top-level ``csrc/`` sources inside the wheel as ``gsnb/csrc``.

An installed, non-editable gsnb then finds them next to its own modules and can
compile the rasterizer for the GPU of the machine it runs on.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

CSRC = Path(__file__).parent / "csrc"
SUFFIXES = {".cu", ".cuh", ".cpp", ".h"}


class BuildPyWithSources(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / "gsnb" / "csrc"
        target.mkdir(parents=True, exist_ok=True)
        for source in sorted(CSRC.iterdir()):
            if source.suffix in SUFFIXES:
                self.copy_file(str(source), str(target / source.name))


setup(cmdclass={"build_py": BuildPyWithSources})
