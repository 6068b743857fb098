"""``TrainingPanel``: a ``Trainer`` in a notebook: buttons, knobs, curves and a live render."""

from __future__ import annotations

import contextlib
import html
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

import torch

from gsnb.data.dataset import scaled_view
from gsnb.live.imaging import encode_image
from gsnb.live.throttle import Inbox, RateLimit, TimeBudget
from gsnb.notebook.figures import TrainingCurves
from gsnb.notebook.knob_widgets import KnobControls
from gsnb.train.exposure import apply_exposure
from gsnb.train.knobs import describe_knobs

if TYPE_CHECKING:
    from gsnb.data.dataset import View
    from gsnb.train import EvalResult, StepMetrics, Trainer

GIB = 2**30
# How often the panel's thread looks for something to redraw (the limits below still apply).
POLL_SECONDS = 0.1


class TrainingPanel:
    """A widgets panel for a :class:`~gsnb.train.Trainer` that trains in the background.

    It shows start, pause/resume and stop buttons, a progress bar, the
    Gaussian count, a GPU memory gauge, live plotly curves (loss, train and
    test PSNR, Gaussians), the render from a chosen training camera beside its
    photo, and a control for every live knob (``trainer.knobs()``; a change
    applies at the next step). Training runs in the trainer's own thread, so
    the notebook stays usable; an error there shows here with its traceback
    and Start runs again.

    The panel redraws from its own thread, throttled so that it costs little
    training time: curves and counters at most ``curve_hz`` times a second,
    the live render at most ``render_hz`` times a second and, since a render
    holds the trainer's lock, never more than ``render_share`` of the wall time.
    :attr:`redraw_seconds` adds up the time its redraws took.

    Args:
        trainer: the trainer to drive.
        camera: training view shown live (index into ``trainer.dataset.train`` or its name).
        image_width: width of the live render and photo in pixels (at most the view's).
        curve_hz, render_hz, render_share: the update limits above.

    Example:
        >>> import tempfile
        >>> from gsnb.data.dataset import load_dataset
        >>> from gsnb.data.synthetic import make_synthetic_scene
        >>> from gsnb.train import Trainer, TrainConfig
        >>> data = load_dataset(make_synthetic_scene(tempfile.mkdtemp(), num_views=4, size=16))
        >>> trainer = Trainer(data, TrainConfig(steps=2, max_init_points=50, device="cpu"))
        >>> panel = TrainingPanel(trainer)   # in a notebook: `panel` as a cell's last line shows it
        >>> panel.start_button.click(); trainer.wait(); panel.update(force=True)
        >>> panel.progress.value, trainer.status
        (2, 'finished')
        >>> panel.close()
    """

    def __init__(
        self,
        trainer: Trainer,
        *,
        camera: int | str = 0,
        image_width: int = 320,
        curve_hz: float = 4.0,
        render_hz: float = 2.0,
        render_share: float = 0.03,
    ) -> None:
        import ipywidgets as w

        self.trainer = trainer
        self.image_width = int(image_width)
        self._steps: Inbox[StepMetrics] = Inbox()
        self._evals: Inbox[EvalResult] = Inbox()
        self._curve_limit = RateLimit(1.0 / curve_hz)
        self._render_budget = TimeBudget(1.0 / render_hz, render_share)
        self._knob_limit = RateLimit(1.0)
        self._tick_lock = threading.Lock()
        self._rendered_step = -1
        self._shown_error: BaseException | None = None
        self._rate_mark = (time.monotonic(), trainer.step_count)
        self.steps_per_second = 0.0
        self.redraw_seconds = 0.0

        self.start_button = w.Button(description="Start", icon="play", button_style="success")
        self.pause_button = w.Button(description="Pause", icon="pause")
        self.stop_button = w.Button(description="Stop", icon="stop", button_style="danger")
        self.evaluate_button = w.Button(description="Evaluate", icon="check")
        self.status = w.HTML()
        self.progress = w.IntProgress(min=0, max=trainer.config.steps, value=trainer.step_count)
        self.progress_label = w.HTML()
        self.gaussians = w.HTML()
        self.memory = w.FloatProgress(min=0.0, max=1.0, value=0.0, bar_style="info")
        self.memory_label = w.HTML()
        self.curves = TrainingCurves()
        self.live = self._live_section(w, camera)
        self.knobs = KnobControls(trainer)
        self.message = w.HTML()
        self.error = w.HTML()
        self.settings = w.HTML(self._settings_text())
        self.widget = self._layout(w)

        self.start_button.on_click(lambda _: self._safely(self._start))
        self.pause_button.on_click(lambda _: self._safely(self._toggle_pause))
        self.stop_button.on_click(lambda _: self._safely(self._stop))
        self.evaluate_button.on_click(lambda _: self._safely(self._evaluate))
        self._remove_callbacks = [
            trainer.on_step(self._steps.put),
            trainer.on_eval(self._evals.put),
        ]
        self.update(force=True)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._ui_loop, name="gsnb-panel", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------- layout
    def _live_section(self, w: Any, camera: int | str) -> Any:
        """The camera choice and the live render beside its photo."""
        self._views: list[View] = list(self.trainer.dataset.train)
        self.camera = w.Dropdown(
            options=[(v.name, i) for i, v in enumerate(self._views)],
            value=self._camera_index(camera),
            description="camera",
        )
        self.live_image = w.Image(format="jpeg", layout={"width": f"{self.image_width}px"})
        self.truth_image = w.Image(format="jpeg", layout={"width": f"{self.image_width}px"})
        self.camera.observe(lambda _: self._safely(self._camera_changed), names="value")
        self._camera_changed()
        images = w.HBox(
            [
                w.VBox([w.HTML("<b>render</b>"), self.live_image]),
                w.VBox([w.HTML("<b>photo</b>"), self.truth_image]),
            ]
        )
        return w.VBox([self.camera, images])

    def _layout(self, w: Any) -> Any:
        buttons = w.HBox(
            [self.start_button, self.pause_button, self.stop_button, self.evaluate_button]
        )
        progress = w.HBox([self.progress, self.progress_label])
        counters = w.HBox([self.gaussians, w.HTML("&nbsp;" * 4), self.memory, self.memory_label])
        return w.VBox(
            [
                w.HBox([buttons, self.status]),
                progress,
                counters,
                self.message,
                self.error,
                self.curves.widget,
                self.live,
                w.HTML("<b>Knobs</b> (applied at the next step)"),
                self.knobs.widget,
                self.settings,
            ]
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = self.widget._repr_mimebundle_(**kwargs) or {}
        bundle["text/plain"] = repr(self)
        return bundle

    def _settings_text(self) -> str:
        cfg, trainer = self.trainer.config, self.trainer
        every = describe_knobs(cfg, "train", live_only=False)
        fixed = [k for k in every if k.name not in self.knobs.controls]
        parts = [f"strategy {trainer.strategy.name}", f"device {trainer.device}"]
        parts += [f"{k.name} {k.value}" for k in fixed if k.name != "device"]
        parts.append(f"background {tuple(round(c, 3) for c in trainer.dataset.background)}")
        return (
            "<small>Fixed for this run (set them with <code>%gs_train</code> options): "
            + html.escape(", ".join(parts))
            + "</small>"
        )

    def _camera_index(self, camera: int | str) -> int:
        if isinstance(camera, str):
            names = [v.name for v in self._views]
            if camera not in names:
                raise ValueError(f"no training view named {camera!r}; the views are {names[:5]}...")
            return names.index(camera)
        if not 0 <= camera < len(self._views):
            raise ValueError(f"camera {camera} is out of range: there are {len(self._views)} views")
        return int(camera)

    # ---------------------------------------------------------- actions
    def _safely(self, action: Any) -> None:
        try:
            action()
        except Exception as err:  # a button must never raise into the front end
            self.message.value = f"<span style='color:#b00'>{html.escape(str(err))}</span>"
        self.update(force=True)

    def _start(self) -> None:
        if self.trainer.running:
            return
        if self.trainer.step_count >= self.trainer.config.steps:
            raise ValueError(
                f"training reached steps={self.trainer.config.steps}; raise the steps knob to go on"
            )
        self.error.value = ""
        self.message.value = ""
        self._shown_error = None
        self.trainer.start()

    def _stop(self) -> None:
        self.trainer.stop()

    def _toggle_pause(self) -> None:
        if self.trainer.status == "paused":
            self.trainer.resume()
        else:
            self.trainer.pause()

    def _evaluate(self) -> None:
        if not self.trainer.dataset.test_ids:
            raise ValueError("this dataset has no test views (loaded with test_every=0)")
        threading.Thread(target=self._evaluate_in_thread, name="gsnb-eval", daemon=True).start()

    def _evaluate_in_thread(self) -> None:
        try:
            result = self.trainer.evaluate()
            self.message.value = html.escape(result.summary())
        except Exception as err:
            self.message.value = f"<span style='color:#b00'>{html.escape(repr(err))}</span>"

    def _camera_changed(self) -> None:
        view = self._views[self.camera.value]
        width = min(view.width, self.image_width)
        self.truth_image.value = encode_image(view.load_image(), "jpeg", width=width)
        self._rendered_step = -1

    # ---------------------------------------------------------- updates
    def update(self, force: bool = False) -> None:
        """Redraw what is due (everything with ``force``); the panel's thread calls this.

        :attr:`redraw_seconds` adds up the time spent here: the cost of watching.
        """
        with self._tick_lock:
            start = time.perf_counter()
            try:
                self._redraw_due(force)
            finally:
                self.redraw_seconds += time.perf_counter() - start

    def _redraw_due(self, force: bool) -> None:
        now = time.monotonic()
        self._update_status()
        if force or self._curve_limit.ready(now):
            self._curve_limit.mark(now)
            self._update_curves(now)
        if force or self._knob_limit.ready(now):
            self._knob_limit.mark(now)
            self.knobs.sync()
        if self._rendered_step != self.trainer.step_count and (
            force or self._render_budget.ready(now)
        ):
            start = time.perf_counter()
            self._render_live()
            self._render_budget.spent(time.perf_counter() - start)

    def _update_curves(self, now: float) -> None:
        steps, evals = self._steps.take(), self._evals.take()
        if steps or evals:
            self.curves.add(steps, evals)
            self.curves.redraw()
        trainer = self.trainer
        done, total = trainer.step_count, trainer.config.steps
        then, then_step = self._rate_mark
        if now - then >= 1.0:
            self.steps_per_second = (done - then_step) / (now - then)
            self._rate_mark = (now, done)
        self.progress.max = total
        self.progress.value = min(done, total)
        rate = f" · {self.steps_per_second:.1f} steps/s" if trainer.running else ""
        self.progress_label.value = f"step {done} / {total}{rate}"
        count = steps[-1].num_gaussians if steps else trainer.num_gaussians
        self.gaussians.value = f"<b>{count:,}</b> Gaussians"
        self._update_memory(steps[-1].gpu_memory if steps else None)

    def _update_memory(self, peak: int | None) -> None:
        device = self.trainer.device
        if device.type != "cuda":
            self.memory.layout.visibility = "hidden"
            self.memory_label.value = f"training on {device}: no GPU memory to show"
            return
        total = torch.cuda.get_device_properties(device).total_memory
        reserved = torch.cuda.memory_reserved(device)
        self.memory.max = total / GIB
        self.memory.value = reserved / GIB
        self.memory.bar_style = "danger" if reserved > 0.9 * total else "info"
        peak_text = f", peak allocated {peak / GIB:.2f}" if peak else ""
        self.memory_label.value = (
            f"GPU memory {reserved / GIB:.2f} of {total / GIB:.1f} GiB reserved{peak_text}"
        )

    def _update_status(self) -> None:
        trainer = self.trainer
        status = trainer.status
        running = trainer.running
        self.start_button.disabled = running
        self.pause_button.disabled = not running
        self.stop_button.disabled = not running
        self.pause_button.description = "Resume" if status == "paused" else "Pause"
        self.pause_button.icon = "play" if status == "paused" else "pause"
        colour = {"failed": "#b00", "running": "#070", "paused": "#a60"}.get(status, "#333")
        self.status.value = f"<b style='color:{colour}'>{html.escape(status)}</b>"
        err = trainer.error
        if status == "failed" and err is not None and err is not self._shown_error:
            self._shown_error = err
            text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
            self.error.value = (
                f"<b style='color:#b00'>training stopped at step {trainer.step_count}: "
                f"{html.escape(repr(err))}</b> (press Start to go on)"
                f"<pre style='font-size:11px;max-height:240px;overflow:auto'>"
                f"{html.escape(text)}</pre>"
            )

    def _render_live(self) -> None:
        view = self._views[self.camera.value]
        step = self.trainer.step_count
        shown = scaled_view(view, min(view.width, self.image_width))
        rgb = self.trainer.render_view(shown).rgb[0]
        matrix = self.trainer.shown_exposure()  # with exposure on, as exports show the scene
        if matrix is not None:
            rgb = apply_exposure(rgb, matrix)
        self.live_image.value = encode_image(rgb, "jpeg")
        self._rendered_step = step

    def _ui_loop(self) -> None:
        while not self._closed.wait(POLL_SECONDS):
            try:
                self.update()
            except Exception as err:  # keep the panel alive; say what went wrong
                self.message.value = (
                    f"<span style='color:#b00'>panel update failed: {html.escape(repr(err))}</span>"
                )
                self._closed.wait(1.0)

    def close(self) -> None:
        """Stop redrawing, detach from the trainer and close the widgets (training goes on)."""
        self._closed.set()
        if self._thread is not threading.current_thread():
            self._thread.join(5.0)
        for remove in self._remove_callbacks:
            with contextlib.suppress(ValueError):  # already removed
                remove()
        self._remove_callbacks = []
        _close_tree(self.widget)

    def __repr__(self) -> str:
        return f"TrainingPanel({self.trainer!r})"


def _close_tree(widget: Any) -> None:
    """Close ``widget`` and every widget below it (their front-end models go too)."""
    for child in getattr(widget, "children", ()):
        _close_tree(child)
    widget.close()
