"""What the live displays of training share: the notebook panel and the viser viewer.

- :mod:`gsnb.live.throttle`: rate limits, a time budget and an inbox for the display threads;
- :mod:`gsnb.live.imaging`: render tensors to uint8 arrays and encoded images;
- :mod:`gsnb.live.controls`: which control (slider, toggle, dropdown) shows each knob.

Nothing here imports a GUI library; :mod:`gsnb.notebook` and :mod:`gsnb.viewer` build
their widgets from these and never import each other.
"""
