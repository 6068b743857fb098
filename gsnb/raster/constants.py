"""Compositing constants shared by every backend (see DESIGN.md)."""

LOWPASS = 0.3
"""Added to the diagonal of each 2D covariance, in px^2 (EWA low-pass)."""

ALPHA_MAX = 0.99
"""Per-splat alpha is clamped to this value."""

ALPHA_MIN = 1.0 / 255.0
"""A splat contributes to a pixel only where its alpha is at least this."""

T_MIN = 1e-4
"""A pixel stops compositing once its transmittance would fall below this."""

TILE_SIZE = 16
"""Tile edge in pixels used to bin splats."""

NEAR_PLANE = 0.01
"""The default near plane: splats closer to the camera (view-space depth) are culled."""

FAR_PLANE = 1e10
"""The default far plane: splats farther than this are culled."""

FOV_CLAMP = 1.3
"""The Jacobian of the projection is evaluated with x/z, y/z clamped to this factor of the FOV."""
