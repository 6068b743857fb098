"""A capture's test images as gsnb makes them and as gsplat's example trainer makes them.

Two trainers that score their renders against differently made test images are not scored
on the same task. At a downscale factor F with a distorted lens:

- gsnb (:class:`gsnb.data.images.ImagePipeline`) undistorts each photo at full resolution
  (bilinear, pixel centres at i + 0.5) and then area-averages it down by F;
- gsplat 1.5.3's ``examples/simple_trainer.py`` (its COLMAP parser) reads ``images_F/``,
  which its resizer writes with PIL's LANCZOS at ``round(W / F) x round(H / F)``, undistorts
  those at that size (bilinear, OpenCV's pixel centres at integers, the intrinsics divided
  by F) and crops them to the region every output pixel sees (``getOptimalNewCameraMatrix``
  with alpha 0).

For each test view this gives the PSNR of one version against the other over their common
pixels, and each version's detail: the mean square of the image minus its Gaussian blur
(``--sigma`` px), the error a model that does not draw that detail makes on it. Its
difference between the versions, against a view's error at a typical test PSNR
(``--at-psnr``), is what the sharper version costs such a model in dB::

    python benchmarks/image_pipelines.py ../shared/data/fox --downscale 2 --out DIR

Writes ``DIR/image_pipelines.json``. Perspective lenses (OpenCV's 4 or 5 coefficients) only.
Photos with an alpha channel differ wherever they are transparent as well: gsnb composites
them over its background, gsplat's parser drops alpha (``alpha`` in each view's row).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import environment, git_commit, write_json

from gsnb.data.camera import Camera
from gsnb.data.dataset import View, load_dataset


def gsplat_image(path: Path, camera: Camera, factor: int) -> tuple[np.ndarray, tuple[int, int]]:
    """``[h, w, 3]`` uint8: the photo at ``path`` as gsplat 1.5.3's example parser hands it to
    training at ``factor`` (LANCZOS-resized, undistorted at that size, cropped to the valid
    region; the alpha channel dropped), and the crop's top-left corner ``(x, y)``.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> Image.fromarray(np.full((8, 12, 3), 90, np.uint8)).save(folder / "a.png")
        >>> image, corner = gsplat_image(folder / "a.png", Camera(12, 8, 10.0, 10.0, 6.0, 4.0), 2)
        >>> image.shape, corner
        ((4, 6, 3), (0, 0))
    """
    if camera.fisheye or len(camera.distortion) not in (4, 5):
        raise ValueError("only perspective lenses with 4 or 5 OpenCV coefficients are compared")
    photo = Image.open(path).convert("RGB")
    size = (round(photo.width / factor), round(photo.height / factor))
    small = np.asarray(photo.resize(size, Image.LANCZOS) if factor > 1 else photo)
    if not camera.is_distorted:
        return small, (0, 0)
    k = np.array([[camera.fx, 0.0, camera.cx], [0.0, camera.fy, camera.cy], [0.0, 0.0, 1.0]])
    k[:2] /= factor  # as the parser does: COLMAP's intrinsics taken as OpenCV's, then scaled
    k[0] *= small.shape[1] / (camera.width // factor)
    k[1] *= small.shape[0] / (camera.height // factor)
    coefficients = np.asarray(camera.distortion, np.float64)
    width, height = small.shape[1], small.shape[0]
    new_k, (x, y, w, h) = cv2.getOptimalNewCameraMatrix(k, coefficients, (width, height), 0)
    map_x, map_y = cv2.initUndistortRectifyMap(
        k, coefficients, None, new_k, (width, height), cv2.CV_32FC1
    )
    return cv2.remap(small, map_x, map_y, cv2.INTER_LINEAR)[y : y + h, x : x + w], (x, y)


def detail(image: np.ndarray, sigma: float) -> float:
    """Mean square of ``image`` (``[h, w, 3]`` in [0, 1]) minus its Gaussian blur of ``sigma``
    px, away from the borders: the fine structure a blurrier rendition misses.

    Example:
        >>> flat = np.full((32, 32, 3), 0.5)
        >>> round(detail(flat, 1.0), 12)
        0.0
        >>> detail(np.indices((32, 32)).sum(0)[..., None].repeat(3, -1) % 2 * 1.0, 1.0) > 0.1
        True
    """
    blurred = cv2.GaussianBlur(image, (0, 0), sigma)
    margin = math.ceil(4 * sigma)
    high = (image - blurred)[margin:-margin, margin:-margin]
    return float(np.mean(high**2))


def compare_view(view: View, factor: int, sigma: float, at_psnr: float) -> dict[str, Any]:
    """One test view: both versions' sizes, their PSNR against each other over the pixels both
    hold (gsnb's image cut to gsplat's crop), each one's :func:`detail` there, and what gsnb's
    extra detail costs a model that misses it at a test PSNR of ``at_psnr`` (None where
    gsplat's version holds more detail than that error)."""
    ours = view.load_bytes().numpy()
    camera = view.pipeline.camera if view.pipeline is not None else None
    if camera is None:
        raise ValueError(f"{view.name}: no camera model to rebuild gsplat's image from")
    if view.pipeline.downscale != factor:
        raise ValueError(
            f"{view.name} is read from {Path(view.image_path).parent.name}/, already downscaled: "
            "compare from the full-resolution photos (move that folder aside)"
        )
    theirs, (x, y) = gsplat_image(Path(view.image_path), camera, factor)
    h = min(theirs.shape[0], ours.shape[0] - y)
    w = min(theirs.shape[1], ours.shape[1] - x)
    a, b = ours[y : y + h, x : x + w] / 255.0, theirs[:h, :w] / 255.0
    mse = float(np.mean((a - b) ** 2))
    with Image.open(view.image_path) as photo:
        alpha = "A" in photo.getbands()
    d_ours, d_theirs = detail(a, sigma), detail(b, sigma)
    error = 10 ** (-at_psnr / 10)
    share = (error + d_ours - d_theirs) / error
    return {
        "alpha": alpha,
        "gsnb_size": [int(ours.shape[1]), int(ours.shape[0])],
        "gsplat_size": [int(theirs.shape[1]), int(theirs.shape[0])],
        "psnr_between": round(10 * math.log10(1 / mse), 2) if mse > 0 else math.inf,
        "detail_gsnb": d_ours,
        "detail_gsplat": d_theirs,
        "detail_ratio": round(d_theirs / d_ours, 4) if d_ours > 0 else None,
        "cost_db": round(10 * math.log10(share), 3) if share > 0 else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data", type=Path, help="a COLMAP or transforms.json capture")
    parser.add_argument("--downscale", type=int, default=2)
    parser.add_argument("--sigma", type=float, default=1.0, help="blur of the detail measure")
    parser.add_argument(
        "--at-psnr", type=float, default=33.4, help="a typical test PSNR, for the cost in dB"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.downscale < 1 or args.sigma <= 0:
        parser.error("--downscale must be >= 1 and --sigma > 0")
    try:
        dataset = load_dataset(args.data, downscale=args.downscale)
    except (FileNotFoundError, ValueError) as err:
        parser.error(str(err))
    if not dataset.test:
        parser.error(f"{args.data} has no test views (every 8th photo is held out)")
    views = {
        view.name: compare_view(view, args.downscale, args.sigma, args.at_psnr)
        for view in tqdm(dataset.test, desc="test views")
    }
    ratios = [v["detail_ratio"] for v in views.values() if v["detail_ratio"] is not None]
    costs = [v["cost_db"] for v in views.values() if v["cost_db"] is not None]
    summary = {
        "views": len(views),
        "psnr_between": [min(v["psnr_between"] for v in views.values()),
                         max(v["psnr_between"] for v in views.values())],
        "detail_ratio_mean": round(statistics.fmean(ratios), 4) if ratios else None,
        "cost_db_mean": round(statistics.fmean(costs), 3) if costs else None,
    }  # fmt: skip
    payload = {
        "benchmark": "image_pipelines",
        "environment": environment(),
        "commit": git_commit(),
        "data": str(args.data),
        "settings": {"downscale": args.downscale, "sigma": args.sigma, "at_psnr": args.at_psnr},
        "summary": summary,
        "views": views,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "image_pipelines.json", payload)
    low, high = summary["psnr_between"]
    print(f"{len(views)} test views: the two versions differ by {low:.1f}-{high:.1f} dB PSNR")
    if any(v["alpha"] for v in views.values()):
        print("the photos have alpha: gsnb composites them over its background, gsplat's parser")
        print("drops alpha, so the two versions also differ wherever a photo is transparent")
    if summary["detail_ratio_mean"] is not None:
        ratio = summary["detail_ratio_mean"]
        print(f"gsplat's holds {ratio:.2f}x gsnb's detail (blur of {args.sigma} px)")
    if summary["cost_db_mean"] is not None:
        cost = summary["cost_db_mean"]
        print(
            f"scored against gsnb's, a model that draws neither's extra detail reads {cost:.3f} dB"
        )
        print(f"lower than against gsplat's (at a test PSNR of {args.at_psnr} dB)")
    print(f"wrote {args.out / 'image_pipelines.json'}")


if __name__ == "__main__":
    main()
