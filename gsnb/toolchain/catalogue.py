"""The catalogue of known build failures: each one's cause, its fix, and the text that shows it.

An entry is found in two ways: up front, by a rule that looks at what discovery
found (:mod:`gsnb.toolchain.rules`), or afterwards, by recognising compiler and loader
output (:func:`recognise`). Both give a :class:`Diagnosis`: one sentence for the
cause, one for the fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Entry:
    """One known failure.

    Attributes:
        id: short stable name, e.g. ``"no-kernel-image"``.
        title: a few words for tables.
        cause: sentence template; ``{name}`` fields come from the context, from
            named groups of the matching pattern, or from ``defaults``. A part in
            square brackets (``"nvcc[ {nvcc}]"``) is left out when a field in it
            has no value, so a sentence never shows a placeholder; ``[a|b]`` gives
            ``b`` instead.
        fix: sentence template, same fields.
        patterns: regular expressions recognising it in compiler/loader output.
        defaults: values of template fields that the context may lack.
    """

    id: str
    title: str
    cause: str
    fix: str
    patterns: tuple[str, ...] = ()
    defaults: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Diagnosis:
    """A failure named: its catalogue entry, the cause and the fix as sentences.

    Example:
        >>> d = diagnose("ninja-missing")
        >>> d.entry.id, str(d).startswith("the ninja build tool was not found")
        ('ninja-missing', True)
    """

    entry: Entry
    cause: str
    fix: str
    evidence: str = ""

    def __str__(self) -> str:
        return f"{self.cause}. Fix: {self.fix}"


_ENTRIES: list[Entry] = [
    Entry(
        "torch-cpu-only",
        "torch without CUDA",
        "torch {torch} is a CPU-only build: it cannot compile or run CUDA code",
        "install a CUDA build of torch, e.g. pip install torch --index-url "
        "https://download.pytorch.org/whl/cu130",
        (r"Torch not compiled with CUDA enabled",),
        {"torch": "in this environment"},
    ),
    Entry(
        "no-gpu",
        "no GPU visible",
        "torch sees no CUDA GPU in this process{why}",
        "check that nvidia-smi lists the GPU and that CUDA_VISIBLE_DEVICES (now {visible}) "
        "does not hide it; to compile without a GPU, name the architecture: gsnb build --arch 9.0",
        (
            r"no CUDA GPUs are available",
            r"Found no NVIDIA driver on your system",
            r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
            r"CUDA driver initialization failed",
        ),
        {"why": "", "visible": "unset"},
    ),
    Entry(
        "driver-too-old",
        "NVIDIA driver too old",
        "the NVIDIA driver {driver} is too old for CUDA {cuda} (it needs {min_driver} or newer)",
        "update the NVIDIA driver, or use a torch and toolkit of an older CUDA major",
        (
            r"CUDA driver version is insufficient for CUDA runtime version",
            r"The NVIDIA driver on your system is too old",
            r"the provided PTX was compiled with an unsupported toolchain",
        ),
        {
            "driver": "installed",
            "cuda": "of this torch",
            "min_driver": "the version its release notes name",
        },
    ),
    Entry(
        "no-toolkit",
        "no CUDA toolkit",
        "no CUDA toolkit (nvcc with cuda_runtime.h and libcudart) was found",
        "install the CUDA toolkit of torch's CUDA version[ ({torch_cuda})]: conda install -c "
        "conda-forge cuda-nvcc[={torch_cuda}] cuda-cudart-dev[={torch_cuda}] (or NVIDIA's "
        "installer); if one is installed, set CUDA_HOME to its folder",
        (
            r"CUDA_HOME environment variable is not set",
            r"nvcc: (?:command )?not found",
            r"nvcc not found at",
        ),
    ),
    Entry(
        "cuda-home-invalid",
        "CUDA_HOME points elsewhere",
        "{var}[={value}] is not a CUDA toolkit: {problem}",
        "unset {var} (gsnb finds the toolkit itself) or point it to a folder holding "
        "bin/nvcc, include/cuda_runtime.h and lib64/libcudart.so",
        (),
        {"var": "CUDA_HOME", "problem": "it lacks nvcc or the CUDA runtime"},
    ),
    Entry(
        "toolkit-root-wrong",
        "toolkit root guessed wrong",
        "the CUDA toolkit root was taken to be {guess}, which has no {missing}",
        "gsnb hands the real root ({root}) to torch itself; outside gsnb, export CUDA_HOME={root}",
        (
            r"cannot find -lcudart",
            r"cuda_runtime(?:_api)?\.h: No such file or directory",
        ),
        {
            "guess": "the folder above nvcc's folder (a wrapper script or link in the way)",
            "missing": "lib64/libcudart.so or include/cuda_runtime.h",
            "root": "the toolkit folder gsnb doctor shows",
        },
    ),
    Entry(
        "toolkit-root-off-by-one",
        "CUDA_PATH one folder off",
        "the CUDA toolkit root is one folder off ({value}), so the compiler cannot find "
        "cuda_runtime.h",
        "set CUDA_PATH to the folder holding bin\\nvcc.exe and include\\cuda_runtime.h "
        "({root}); gsnb passes that folder to the build itself",
        (r"fatal error C1083: Cannot open include file: '(?:cuda_runtime(?:_api)?|cuda)\.h'",),
        {"value": "e.g. ...\\CUDA instead of ...\\CUDA\\v13.0", "root": "the vX.Y folder"},
    ),
    Entry(
        "cl-not-found",
        "cl.exe not found",
        "the Microsoft C++ compiler (cl.exe) was not found{where}",
        'start Jupyter from the "x64 Native Tools Command Prompt for VS 2022", or install '
        'Visual Studio 2022 Build Tools with "Desktop development with C++" (gsnb finds '
        "cl.exe through vswhere by itself)",
        (
            r"'cl' is not recognized as an internal or external command",
            r"Cannot find compiler 'cl\.exe' in PATH",
            r"Microsoft Visual C\+\+ 14\.0 or greater is required",
            r"Error checking compiler version for cl",
        ),
        {"where": " on PATH or through vswhere"},
    ),
    Entry(
        "dll-load-failed",
        "DLL load failed",
        "Windows could not load a DLL the module needs{detail}: usually another CUDA "
        "version's cudart64_*.dll earlier on PATH, or a CUDA bin folder Python does not search",
        "gsnb calls os.add_dll_directory() for torch's lib folder and the toolkit's bin folder "
        "before loading; in your own code call os.add_dll_directory() with [the folder {bin}|"
        "the toolkit's bin folder] before the import and remove other CUDA versions' folders "
        "from PATH",
        (r"DLL load failed while importing", r"\[WinError 126\]"),
        {"detail": ""},
    ),
    Entry(
        "env-not-seen",
        "variable not seen",
        "[{var} is set to {stored} for new shells but this process sees {seen}|a variable is "
        "set differently for new shells than in this process]: it was set after Jupyter "
        "started, or only in another shell",
        "restart Jupyter (or the terminal) so it inherits the variable, or set it for this "
        "kernel with the %env magic[: %env {var}={stored}]",
        (),
    ),
    Entry(
        "shm-small",
        "small /dev/shm",
        "the shared-memory folder /dev/shm holds only {size}",
        "DataLoader workers pass batches through it: enlarge it (WSL2 or Linux: sudo mount -o "
        "remount,size=8G /dev/shm; Docker: --shm-size=8g or --ipc=host) or use num_workers=0",
        (
            r"DataLoader worker \(pid \d+\) is killed by signal: Bus error",
            r"unable to write to file </torch_\d+",
            r"insufficient shared memory \(shm\)",
        ),
        {"size": "little"},
    ),
    Entry(
        "cuda-major-mismatch",
        "nvcc and torch differ",
        "nvcc[ {nvcc}] and torch's CUDA[ {torch_cuda}] have different major versions",
        "install a CUDA toolkit of torch's major[ ({torch_major}.x: conda install -c "
        "conda-forge cuda-nvcc={torch_cuda} cuda-cudart-dev={torch_cuda})] or a torch built "
        "for nvcc's CUDA major[ ({nvcc_major})]",
        (
            r"The detected CUDA version \((?P<nvcc>[\d.]+)\) mismatches the version that was "
            r"used to compile\s+PyTorch \((?P<torch_cuda>[\d.]+)\)",
        ),
    ),
    Entry(
        "arch-unsupported",
        "architecture unsupported",
        "nvcc {nvcc} cannot compile for [sm_{sm}|this GPU's architecture]{why}",
        "{remedy}",
        (
            r"Unsupported gpu architecture '(?:compute|sm)_(?P<sm>\d+)[af]?'",
            r"Value '(?:sm|compute)_(?P<sm>\d+)[af]?' is not defined for option 'gpu-architecture'",
        ),
        {
            "nvcc": "of this toolkit",
            "why": "",
            "remedy": "use a toolkit that supports the GPU (sm_100 and sm_120 need CUDA 12.8 or "
            "newer; CUDA 13 dropped everything below sm_75) with a torch of the same CUDA "
            "major, or build for another architecture with --arch",
        },
    ),
    Entry(
        "host-compiler-unsupported",
        "host compiler refused",
        "the host compiler {compiler} is not one nvcc {nvcc} accepts ({supported})",
        "{remedy}",
        (
            r"unsupported GNU version! gcc versions later than (?P<max_gcc>\d+) are not supported",
            r"unsupported (?:HOS )?clang version",
            r"unsupported Microsoft Visual Studio version",
            r"C\+\+20 or later compatible compiler is required",
        ),
        {
            "compiler": "in use",
            "nvcc": "of this toolkit",
            "supported": "see NVIDIA's installation guide",
            "remedy": "install a supported compiler (e.g. sudo apt install g++-13) and export "
            "CC=gcc-13 CXX=g++-13; gsnb picks a supported gcc-N on PATH by itself",
        },
    ),
    Entry(
        "host-compiler-missing",
        "no host compiler",
        "no host C++ compiler was found{what}",
        "install one: sudo apt install build-essential (Debian/Ubuntu), sudo dnf install "
        "gcc-c++ (Fedora) or conda install -c conda-forge cxx-compiler",
        (
            r"failed to execute '?(?:gcc|g\+\+|c\+\+|cc1plus)",
            r"No such file or directory: '(?:c\+\+|g\+\+|gcc)'",
            r"(?:^|\s)(?:c\+\+|g\+\+|gcc): (?:command )?not found",
        ),
        {"what": ""},
    ),
    Entry(
        "ninja-missing",
        "ninja missing",
        "the ninja build tool was not found",
        "pip install ninja (gsnb also finds the ninja of the ninja Python package when its "
        "folder is not on PATH)",
        (r"Ninja is required to load C\+\+ extensions", r"ninja: (?:command )?not found"),
    ),
    Entry(
        "python-headers-missing",
        "Python headers missing",
        "Python's C headers (Python.h) are missing for Python {py}",
        "install them: sudo apt install python{py}-dev (Debian/Ubuntu) or python3-devel "
        "(Fedora); conda, pyenv and uv Pythons ship them",
        (r"Python\.h: No such file or directory",),
        {"py": "3"},
    ),
    Entry(
        "compiler-out-of-memory",
        "compiler out of memory",
        "a compiler process ran out of memory ({jobs} jobs at once)",
        "build with fewer parallel jobs: %gs_build --jobs {fewer} (gsnb build --jobs {fewer})",
        (
            r"virtual memory exhausted",
            r"cc1plus: out of memory",
            r"Killed signal terminated program",
            r"nvcc error\s*:.*killed",
        ),
        {"jobs": "several", "fewer": "2"},
    ),
    Entry(
        "disk-full",
        "disk full",
        "the disk ran out of space{where}",
        "free space there, or point GSNB_CACHE_DIR (--cache-dir) to a larger disk",
        (r"No space left on device", r"Disk quota exceeded", r"\[Errno 28\]"),
        {"where": ""},
    ),
    Entry(
        "cache-not-writable",
        "cache not writable",
        "the build cache {cache_dir} is not writable{why}",
        "set GSNB_CACHE_DIR (or pass --cache-dir) to a folder you can write, e.g. "
        "export GSNB_CACHE_DIR=$HOME/gsnb-cache",
        (r"Permission denied", r"Read-only file system"),
        {"cache_dir": "folder", "why": ""},
    ),
    Entry(
        "sources-missing",
        "sources missing",
        "no CUDA/C++ sources (*.cu, *.cpp) were found in {sources}",
        "reinstall gsnb (pip install --force-reinstall gsnb); in a source checkout, restore csrc/",
        (),
        {"sources": "gsnb's csrc folder"},
    ),
    Entry(
        "no-kernel-image",
        "no code for this GPU",
        "the module has no code for this GPU{gpu_sm}; it was built for {built}",
        "rebuild for this GPU: %gs_build --force without --arch (gsnb build --force)",
        (
            r"no kernel image is available for execution on the device",
            r"invalid device function",
        ),
        {"gpu_sm": "", "built": "other architectures"},
    ),
    Entry(
        "symbol-not-defined",
        "sources disagree",
        "the compiled sources do not agree with each other: {symbol} is declared but no file "
        "defines it (a header differs from its .cu file, or a file changed during the build)",
        "rebuild with --force; if it stays, make the declaration in the header match its "
        "definition",
        (r"undefined symbol: (?P<symbol>_ZN4gsnb\S*)",),
        {"symbol": "a gsnb function"},
    ),
    Entry(
        "sources-changed",
        "sources changed while compiling",
        "the sources in {sources} changed while they were being compiled",
        "build again once the edits are saved (nothing was cached from this build)",
        (),
        {"sources": "the sources folder"},
    ),
    Entry(
        "undefined-symbol",
        "undefined symbol on import",
        "the module does not match the libraries of this process (an undefined symbol"
        "[: {symbol}]): a stale build, or one made for another torch",
        "rebuild from scratch with %gs_build --clean (gsnb build --clean), then restart the kernel",
        (r"undefined symbol: (?P<symbol>\S+)",),
    ),
    Entry(
        "library-missing",
        "shared library missing",
        "a shared library the module needs was not found[ ({library})]",
        "import torch before the module (gsnb does) and check torch's CUDA libraries: "
        "pip install --force-reinstall torch",
        (r"(?P<library>lib[\w.+-]+\.so[\w.]*): cannot open shared object file",),
    ),
    Entry(
        "stale-lock",
        "stale lock recovered",
        "a lock left by an interrupted build[ (pid {pid})] was found",
        "nothing to do: gsnb removed it and went on",
        (),
    ),
    Entry(
        "half-built",
        "half-built cache recovered",
        "a half-finished build was found in {build_dir}",
        "nothing to do: gsnb removed it and built again",
        (),
        {"build_dir": "the cache"},
    ),
    Entry(
        "msbuild-nvcc-failed",
        "nvcc failed under MSBuild",
        "nvcc failed inside MSBuild (MSB3721); the real error is in the lines just above it",
        "read the first error line above the MSB3721 line in the log ({log}): most often a "
        "Visual Studio version nvcc does not support, or a compile error",
        (r"error MSB3721: The command .*nvcc(?:\.exe)?.* exited with code \d+",),
        {"log": "the build folder (build.log)"},
    ),
    Entry(
        "compile-error",
        "compile error",
        "the compiler stopped with an error[: {line}]",
        "see the full log at {log}; if the error is in gsnb's own sources, please report it "
        "with that log",
        (r"(?P<line>[^\n]*?(?:\berror\b|\bfatal\b)\s*:[^\n]*)",),
        {"log": "the build folder (build.log)"},
    ),
]

CATALOGUE: dict[str, Entry] = {entry.id: entry for entry in _ENTRIES}
"""Every known failure by id, in the order they are tried on compiler output."""


_FIELD = re.compile(r"{(\w+)}")
_OPTIONAL = re.compile(r"\[([^\[\]|]*)(?:\|([^\[\]]*))?\]")


def render(template: str, values: Mapping[str, str]) -> str:
    """``template`` filled from ``values``; ``[...]`` parts whose fields lack a value are left out.

    A part ``[a|b]`` gives ``a`` when all its fields have values, else ``b``; a field
    outside brackets without a value is rendered empty (never a placeholder).

    Example:
        >>> render("nvcc[ {nvcc}] is too old for [sm_{sm}|this GPU]", {"nvcc": "12.4"})
        'nvcc 12.4 is too old for this GPU'
    """

    def fill(text: str) -> str:  # each field once: a value's own braces stay as they are
        return _FIELD.sub(lambda m: values.get(m.group(1), ""), text)

    def part(match: re.Match[str]) -> str:
        present, absent = match.group(1), match.group(2) or ""
        return fill(present) if all(n in values for n in _FIELD.findall(present)) else fill(absent)

    pieces, end = [], 0
    for match in _OPTIONAL.finditer(template):
        pieces += [fill(template[end : match.start()]), part(match)]
        end = match.end()
    return "".join([*pieces, fill(template[end:])])


def _derived(values: dict[str, str]) -> None:
    """Values that follow from others: torch's own CUDA version, majors of versions."""
    if "torch_cuda" not in values:
        import torch

        if torch.version.cuda:
            values["torch_cuda"] = str(torch.version.cuda)
    # Majors follow from versions the message names ("13.0" -> "13").
    for version, major in (("torch_cuda", "torch_major"), ("nvcc", "nvcc_major")):
        if major not in values and re.match(r"\d+", values.get(version, "")):
            values[major] = values[version].split(".")[0]


def diagnose(entry_id: str, evidence: str = "", **context: object) -> Diagnosis:
    """The :class:`Diagnosis` of entry ``entry_id``, its templates filled from ``context``.

    Example:
        >>> print(diagnose("disk-full", where=" in /tmp").cause)
        the disk ran out of space in /tmp
    """
    entry = CATALOGUE[entry_id]
    values = {**entry.defaults, **{k: str(v) for k, v in context.items() if v is not None}}
    _derived(values)
    return Diagnosis(entry, render(entry.cause, values), render(entry.fix, values), evidence)


def recognise(text: str, **context: object) -> list[Diagnosis]:
    """Every catalogue entry whose patterns occur in ``text`` (compiler or loader output).

    Specific entries come first; the generic ``compile-error`` is given only when
    nothing more specific matched.

    Example:
        >>> [d.entry.id for d in recognise("/usr/bin/ld: cannot find -lcudart")]
        ['toolkit-root-wrong']
    """
    found: list[Diagnosis] = []
    for entry in _ENTRIES:
        if entry.id == "compile-error" and found:
            break
        for pattern in entry.patterns:
            match = re.search(pattern, text, flags=re.MULTILINE | re.IGNORECASE)
            if match is None:
                continue
            groups = {k: v.strip() for k, v in match.groupdict().items() if v}
            line = _line_of(text, match.start())
            found.append(diagnose(entry.id, line, **{**context, **groups}))
            break
    return found


def _line_of(text: str, position: int) -> str:
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    return text[start : end if end >= 0 else len(text)].strip()[:500]
