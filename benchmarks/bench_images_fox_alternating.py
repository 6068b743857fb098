"""The fox at downscale 2, 7,000 steps, images on the GPU and on the CPU, alternated twice.

Run on the GPU machine from the repository root (the fox copied to ``.device/fox``):

    python benchmarks/bench_images_fox_alternating.py OUT
"""

import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_images import train_fox

from gsnb.data.dataset import load_dataset
from gsnb.train.inputs import ViewImages

FOX = Path(".device/fox")


def main() -> None:
    out = Path(sys.argv[1])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "fox"
        # Fill the downscaled-image cache first, so no run pays for making it.
        ViewImages(load_dataset(FOX, downscale=2, cache_dir=cache).views, torch.device("cpu"))
        for place in ("gpu", "cpu", "gpu", "cpu"):
            rows.append(train_fox(FOX, place, 7000, 2, "cuda", cache))
            print(rows[-1], flush=True)
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "runs": rows}
    with open(out / "fox_images_on_alternating.json", "w") as handle:
        json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
