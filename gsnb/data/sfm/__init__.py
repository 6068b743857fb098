"""Structure from motion on pycolmap: photos or a video in, a posed COLMAP dataset out.

pycolmap is imported only when a run starts, so gsnb works without it.

Example:
    >>> from gsnb.data.sfm import ProcessOptions
    >>> ProcessOptions(max_image_size=1600).camera_model
    'SIMPLE_RADIAL'
"""

from gsnb.data.sfm.errors import MissingPycolmap, ProcessError
from gsnb.data.sfm.pipeline import STAGES, ProcessOptions, process
from gsnb.data.sfm.summary import ProcessSummary

__all__ = [
    "STAGES",
    "MissingPycolmap",
    "ProcessError",
    "ProcessOptions",
    "ProcessSummary",
    "process",
]
