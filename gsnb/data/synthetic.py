"""A synthetic demo scene: textured spheres on a checkered floor, ray traced with numpy.

``make_synthetic_scene`` renders the scene from a ring of cameras and writes a
``transforms.json`` dataset (RGBA PNGs: the sky is transparent, so it loads on a
white background like NeRF-synthetic) plus ``points3D.ply``, a sparse set of
coloured surface points to start training from. The images come from an
independent analytic ray tracer, never from gsnb's own renderer.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from gsnb.cameras import intrinsics, look_at, rigid_inverse
from gsnb.data.points import write_ply_points
from gsnb.data.transforms import GL_TO_CV
from gsnb.utils.atomic import atomic_write

_EPS = 1e-4


@dataclass(frozen=True)
class Sphere:
    """A sphere with a procedural texture: ``pattern`` is "checker", "stripes" or "gradient".

    Example:
        >>> Sphere((0.0, 0.0, 1.0), 1.0, (1.0, 0.0, 0.0), (1.0, 1.0, 1.0), "checker").radius
        1.0
    """

    center: tuple[float, float, float]
    radius: float
    color_a: tuple[float, float, float]
    color_b: tuple[float, float, float]
    pattern: str = "checker"

    def albedo(self, normal: np.ndarray) -> np.ndarray:
        """``[N, 3]`` surface colour at unit ``normal [N, 3]`` (latitude-longitude texture)."""
        lat = np.arcsin(np.clip(normal[:, 2], -1.0, 1.0))  # [-pi/2, pi/2]
        lon = np.arctan2(normal[:, 1], normal[:, 0])  # [-pi, pi]
        if self.pattern == "checker":
            mix = ((np.floor(lat / (np.pi / 6)) + np.floor(lon / (np.pi / 6))) % 2).astype(float)
        elif self.pattern == "stripes":
            mix = (np.floor(lat / (np.pi / 10)) % 2).astype(float)
        else:
            mix = 0.5 + 0.5 * np.sin(3.0 * lon) * np.cos(lat)
        a, b = np.asarray(self.color_a), np.asarray(self.color_b)
        return a * (1.0 - mix[:, None]) + b * mix[:, None]


@dataclass(frozen=True)
class SyntheticScene:
    """Spheres standing on a square checkered floor ``z = 0`` (``|x|, |y| <= floor_half``), lit
    by a directional light with hard shadows and ambient light; rays that miss are transparent.

    Example:
        >>> scene = SyntheticScene.random(seed=0)
        >>> rgb, alpha = scene.trace(np.array([[0.0, 0.0, 5.0]]), np.array([[0.0, 0.0, -1.0]]))
        >>> rgb.shape, float(alpha[0])
        ((1, 3), 1.0)
    """

    spheres: tuple[Sphere, ...]
    floor_half: float = 2.5
    checker_size: float = 0.5
    floor_colors: tuple[tuple[float, float, float], tuple[float, float, float]] = (
        (0.92, 0.92, 0.88),
        (0.18, 0.2, 0.25),
    )
    light_dir: tuple[float, float, float] = field(default=(0.45, 0.3, 0.84))
    ambient: float = 0.3
    detail: float = 0.0

    def speckle(self, points: np.ndarray) -> np.ndarray:
        """``[N]`` albedo factor at ``points [N, 3]``: 1 when ``detail`` is 0, else a fixed
        multi-scale pattern of blobs in ``[1 - detail, 1]`` that gives feature detectors
        (SIFT) distinct corners where the checkers and stripes only repeat."""
        if self.detail <= 0.0:
            return np.ones(len(points))
        rng = np.random.default_rng(1234)  # the same pattern for every scene and camera
        freqs = rng.normal(size=(48, 3))
        freqs *= rng.uniform(20.0, 70.0, (48, 1)) / np.linalg.norm(freqs, axis=1, keepdims=True)
        wave = np.sin(points @ freqs.T + rng.uniform(0, 2 * np.pi, 48)).sum(axis=1)
        blobs = 0.5 + 0.5 * np.tanh(wave)
        return 1.0 - self.detail * blobs

    @classmethod
    def random(cls, seed: int = 0) -> SyntheticScene:
        """Three textured spheres whose placement and colours depend only on ``seed``."""
        rng = np.random.default_rng(seed)
        patterns = ("checker", "stripes", "gradient")
        spheres = []
        radii = (0.75, 0.5, 0.4)
        angles = rng.uniform(0, 2 * np.pi) + np.array([0.0, 2.1, 4.2]) + rng.uniform(-0.3, 0.3, 3)
        for i, (radius, angle) in enumerate(zip(radii, angles, strict=True)):
            dist = 0.0 if i == 0 else rng.uniform(1.1, 1.5)
            cx, cy = dist * math.cos(angle), dist * math.sin(angle)
            a, b = rng.uniform(0.1, 1.0, 3), rng.uniform(0.1, 1.0, 3)
            spheres.append(Sphere((cx, cy, radius), radius, tuple(a), tuple(b), patterns[i]))
        return cls(tuple(spheres))

    def _hit_spheres(self, origins: np.ndarray, dirs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Nearest sphere hit: distance ``t [N]`` (inf on a miss) and sphere index ``[N]``."""
        best_t = np.full(len(origins), np.inf)
        best_i = np.full(len(origins), -1)
        for i, s in enumerate(self.spheres):
            oc = origins - np.asarray(s.center)
            b = np.einsum("ij,ij->i", oc, dirs)
            c = np.einsum("ij,ij->i", oc, oc) - s.radius**2
            disc = b * b - c
            root = np.sqrt(np.maximum(disc, 0.0))
            t = np.where(-b - root > _EPS, -b - root, -b + root)
            t = np.where((disc >= 0) & (t > _EPS), t, np.inf)
            closer = t < best_t
            best_t[closer], best_i[closer] = t[closer], i
        return best_t, best_i

    def trace(self, origins: np.ndarray, dirs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Shade rays ``origins [N, 3]``, unit ``dirs [N, 3]``: ``rgb [N, 3]`` and ``alpha [N]``."""
        t_sphere, which = self._hit_spheres(origins, dirs)
        with np.errstate(divide="ignore", invalid="ignore"):
            t_floor = np.where(dirs[:, 2] < -1e-9, -origins[:, 2] / dirs[:, 2], np.inf)
        floor_xy = origins[:, :2] + t_floor[:, None] * dirs[:, :2]
        on_floor = np.isfinite(t_floor) & (np.abs(floor_xy) <= self.floor_half).all(axis=1)
        t_floor = np.where(on_floor, t_floor, np.inf)
        t = np.minimum(t_sphere, t_floor)
        hit = np.isfinite(t)
        points = origins + np.where(hit, t, 0.0)[:, None] * dirs
        normals = np.zeros_like(points)
        albedo = np.zeros_like(points)
        floor_hit = hit & (t_floor <= t_sphere)
        normals[floor_hit] = (0.0, 0.0, 1.0)
        albedo[floor_hit] = self.floor_albedo(points[floor_hit])
        for i, s in enumerate(self.spheres):
            sel = hit & ~floor_hit & (which == i)
            n = (points[sel] - np.asarray(s.center)) / s.radius
            normals[sel], albedo[sel] = n, s.albedo(n)
        albedo *= self.speckle(points)[:, None]
        rgb = albedo * self.shading(points, normals)[:, None]
        return np.where(hit[:, None], rgb, 0.0), hit.astype(np.float64)

    def render(
        self,
        c2w: np.ndarray,
        K: np.ndarray,
        width: int,
        height: int,
        samples: int = 2,
        distortion: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0),
    ) -> np.ndarray:
        """``[height, width, 4]`` straight-alpha RGBA in [0, 1] seen by a camera.

        ``c2w [4, 4]`` is camera-to-world in OpenCV axes, ``K [3, 3]`` the
        intrinsics (pixel centres at ``i + 0.5``) and ``distortion`` OpenCV's
        ``(k1, k2, p1, p2)``: each pixel's rays are undistorted before tracing.
        Each pixel averages ``samples x samples`` stratified rays.
        """
        k_inv = np.linalg.inv(np.asarray(K, dtype=np.float64))
        offsets = (np.arange(samples) + 0.5) / samples
        premult = np.zeros((height * width, 3))
        alpha = np.zeros(height * width)
        jj, ii = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
        for du in offsets:
            for dv in offsets:
                pix = np.stack([ii.ravel() + du, jj.ravel() + dv, np.ones(width * height)], axis=1)
                cam = pix @ k_inv.T
                if any(distortion):
                    cam[:, :2] = undistort_normalized(cam[:, :2], distortion)
                dirs = cam @ c2w[:3, :3].T
                dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
                rgb, hit = self.trace(np.broadcast_to(c2w[:3, 3], dirs.shape), dirs)
                premult += rgb * hit[:, None]
                alpha += hit
        premult /= samples**2
        alpha /= samples**2
        color = np.where(alpha[:, None] > 0, premult / np.maximum(alpha, 1e-12)[:, None], 0.0)
        rgba = np.concatenate([color, alpha[:, None]], axis=1).reshape(height, width, 4)
        return rgba.clip(0.0, 1.0)

    def floor_albedo(self, points: np.ndarray) -> np.ndarray:
        """``[N, 3]`` checker colour of floor ``points [N, 3]``."""
        cells = np.floor(points[:, :2] / self.checker_size).sum(axis=1) % 2
        a, b = (np.asarray(c) for c in self.floor_colors)
        return np.where(cells[:, None] == 0, a, b)

    def shading(self, points: np.ndarray, normals: np.ndarray) -> np.ndarray:
        """``[N]`` light factor: ambient plus Lambert, zero direct light in shadow."""
        light = np.asarray(self.light_dir) / np.linalg.norm(self.light_dir)
        lambert = np.clip(normals @ light, 0.0, 1.0)
        lit = lambert > 0
        shadow_t, _ = self._hit_spheres(
            points[lit] + normals[lit] * 1e-3, np.tile(light, (lit.sum(), 1))
        )
        lambert[np.flatnonzero(lit)[np.isfinite(shadow_t)]] = 0.0
        return self.ambient + (1.0 - self.ambient) * lambert

    def surface_points(self, count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``[count, 3]`` points spread over the surfaces by area, and their lit colours."""
        rng = np.random.default_rng(seed)
        areas = np.array(
            [(2 * self.floor_half) ** 2] + [4 * np.pi * s.radius**2 for s in self.spheres]
        )
        owner = rng.choice(len(areas), size=count, p=areas / areas.sum())
        points, normals, albedo = np.zeros((count, 3)), np.zeros((count, 3)), np.zeros((count, 3))
        floor = owner == 0
        points[floor, :2] = rng.uniform(-self.floor_half, self.floor_half, (floor.sum(), 2))
        normals[floor] = (0.0, 0.0, 1.0)
        albedo[floor] = self.floor_albedo(points[floor])
        for i, s in enumerate(self.spheres, start=1):
            sel = owner == i
            n = rng.normal(size=(sel.sum(), 3))
            n /= np.linalg.norm(n, axis=1, keepdims=True)
            points[sel], normals[sel], albedo[sel] = (
                np.asarray(s.center) + s.radius * n,
                n,
                s.albedo(n),
            )
        albedo *= self.speckle(points)[:, None]
        return points, albedo * self.shading(points, normals)[:, None]


def ring_cameras(num_views: int, radius: float = 4.5, height: float = 2.2) -> np.ndarray:
    """``[num_views, 4, 4]`` camera-to-world (OpenCV axes) on a ring around the origin, alternating
    between two heights, all looking at a point just above the floor's centre (world up is +z).

    Example:
        >>> ring_cameras(4).shape
        (4, 4, 4)
    """
    angles = 2 * np.pi * np.arange(num_views) / num_views
    heights = np.where(np.arange(num_views) % 2 == 0, height, height * 0.55)
    eyes = np.stack([radius * np.cos(angles), radius * np.sin(angles), heights], axis=-1)
    return rigid_inverse(look_at(eyes, np.array([0.0, 0.0, 0.4]), up=(0.0, 0.0, 1.0)))


def make_synthetic_scene(
    out_dir: str | Path,
    *,
    num_views: int = 32,
    size: int | tuple[int, int] = 128,
    seed: int = 0,
    num_points: int = 3000,
    fov_deg: float = 50.0,
    samples: int = 2,
    detail: float = 0.0,
) -> Path:
    """Ray trace the demo scene into ``out_dir`` as a transforms.json dataset; returns ``out_dir``.

    ``size`` is the image size (an int for square images, or ``(width,
    height)``); ``samples`` squared stratified rays per pixel anti-alias edges and
    texture. The output is the same for the same arguments; ``seed`` changes
    the sphere layout, colours and the surface points. ``detail`` in [0, 1]
    darkens every surface by a fixed pattern of blobs (``SyntheticScene.speckle``)
    so that structure from motion finds features; 0 leaves the scene as it was.
    32 views of 128x128 take about a second.

    Example:
        >>> import tempfile
        >>> root = make_synthetic_scene(tempfile.mkdtemp(), num_views=2, size=16)
        >>> sorted(p.name for p in root.iterdir())
        ['images', 'points3D.ply', 'transforms.json']
    """
    if num_views < 1:
        raise ValueError(f"num_views must be >= 1, got {num_views}")
    width, height = (size, size) if isinstance(size, int) else size
    if width < 1 or height < 1 or samples < 1 or num_points < 1:
        raise ValueError("size, samples and num_points must be positive")
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    if not 0.0 <= detail <= 1.0:
        raise ValueError(f"detail must be in [0, 1], got {detail}")
    scene = dataclasses.replace(SyntheticScene.random(seed), detail=detail)
    k_matrix = intrinsics(width, height, fov_deg, axis="x", dtype=torch.float64).numpy()
    focal = float(k_matrix[0, 0])
    c2ws = ring_cameras(num_views)
    frames = []
    for i, c2w in enumerate(c2ws):
        rgba = scene.render(c2w, k_matrix, width, height, samples)
        name = f"images/r_{i:03d}.png"
        with atomic_write(out / name) as handle:
            Image.fromarray((rgba * 255.0 + 0.5).astype(np.uint8), "RGBA").save(handle, "PNG")
        frames.append({"file_path": name, "transform_matrix": (c2w @ GL_TO_CV).tolist()})
    points, rgb = scene.surface_points(num_points, seed)
    write_ply_points(out / "points3D.ply", points, rgb)
    meta = {
        "camera_angle_x": math.radians(fov_deg),
        "fl_x": focal,
        "fl_y": focal,
        "cx": width / 2,
        "cy": height / 2,
        "w": width,
        "h": height,
        "ply_file_path": "points3D.ply",
        "frames": frames,
    }
    with atomic_write(out / "transforms.json", "w") as handle:
        json.dump(meta, handle, indent=1)
    return out


def distort_normalized(xy: np.ndarray, distortion: tuple[float, float, float, float]) -> np.ndarray:
    """OpenCV's radial-tangential model on normalised coordinates ``xy [N, 2]``.

    Example:
        >>> distort_normalized(np.array([[0.5, 0.0]]), (0.1, 0.0, 0.0, 0.0)).tolist()
        [[0.5125, 0.0]]
    """
    k1, k2, p1, p2 = distortion
    x, y = xy[:, 0], xy[:, 1]
    r2 = x * x + y * y
    radial = 1.0 + k1 * r2 + k2 * r2 * r2
    xd = x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x * x)
    yd = y * radial + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y
    return np.stack([xd, yd], axis=1)


def undistort_normalized(
    xy: np.ndarray, distortion: tuple[float, float, float, float], iterations: int = 50
) -> np.ndarray:
    """Invert ``distort_normalized`` by fixed-point iteration (mild distortion), ``[N, 2]``.

    Example:
        >>> d = (0.1, -0.05, 0.001, 0.002)
        >>> xy = np.array([[0.3, -0.4]])
        >>> bool(np.allclose(undistort_normalized(distort_normalized(xy, d), d), xy))
        True
    """
    xy = np.asarray(xy, dtype=np.float64)
    out = xy.copy()
    for _ in range(iterations):
        step = xy - distort_normalized(out, distortion)
        out = out + step
        if np.abs(step).max() < 1e-13:
            break
    return out
