"""Live views of the system behind the source (the pendulum drawn moving, the cheetah...).

One file: the system views (pendulum, cheetah, dialogue, replay) share the view protocol
and the drawing helpers at the top; each view is a short class.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import math
import os
import platform
import threading
import time
from typing import Any

import numpy as np
from idt_desk_widgets.replay_view import ReplayView
from idt_desk_widgets.transcript import TranscriptView
from PySide6.QtCore import QPointF, QRectF, Qt, QTimer
from PySide6.QtGui import QBrush, QColor, QFont, QImage, QPainter, QPen
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

__all__ = ["RENDER_ENV", "VIEWS", "CheetahView", "PendulumView", "StateView", "make_view"]

#: Environment variable choosing the cheetah's drawing: ``skeleton`` (never render), a GL
#: backend (``egl``, ``osmesa``, ``glfw``, ``cgl``: only that one), or ``auto`` / unset.
RENDER_ENV = "IDT_DESK_RENDER"
#: Size (width, height) of the MuJoCo render before the view says its shape; the view
#: then asks for its own aspect ratio at the same number of pixels (320 × 240); frame-rate cap.
RENDER_SIZE = (320, 240)
RENDER_PIXELS = 320 * 240
#: Largest render (width and height): the offscreen buffer's size.
RENDER_MAX = 640
RENDER_FPS = 30.0
_GL_BACKENDS = ("egl", "osmesa", "glfw", "cgl")
_GL_OFF = ("disable", "disabled", "off", "false", "0")


class PendulumView(QWidget):
    """The double pendulum as it moves: rods, bobs and a fading trace of the second bob."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumSize(200, 200)
        self._y: np.ndarray | None = None
        self._l1, self._l2 = 1.0, 1.0
        self._trace: list[tuple[float, float]] = []
        self._text = ""

    def update_info(self, info: dict[str, Any]) -> None:
        """Take the source's latest info (``y``, ``l1``, ``l2``, ``energy_drift``)."""
        if "y" not in info:
            return
        self._y = np.asarray(info["y"], dtype=float)
        self._l1, self._l2 = float(info.get("l1", 1.0)), float(info.get("l2", 1.0))
        th1, th2 = self._y[0], self._y[1]
        x2 = self._l1 * math.sin(th1) + self._l2 * math.sin(th2)
        y2 = self._l1 * math.cos(th1) + self._l2 * math.cos(th2)
        self._trace.append((x2, y2))
        del self._trace[:-120]
        drift = info.get("energy_drift")
        self._text = (f"t = {info.get('time', 0.0):.2f} s"
                      + (f"   |ΔE/E0| = {drift:.1e}" if drift is not None else ""))
        self.update()

    def reset(self) -> None:
        """Forget the trace (a new session starts elsewhere)."""
        self._trace.clear()
        self.update()

    def paintEvent(self, event: Any) -> None:
        """Draw the pendulum."""
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.fillRect(self.rect(), QColor(250, 250, 252))
        w, h = self.width(), self.height()
        scale = 0.45 * min(w, h) / max(self._l1 + self._l2, 1e-9)
        cx, cy = w / 2, h / 2

        def pt(x: float, y: float) -> QPointF:
            return QPointF(cx + scale * x, cy + scale * y)

        p.setPen(QPen(QColor(120, 120, 120)))
        p.drawText(8, 16, self._text or "waiting for data")
        if self._y is None:
            p.end()
            return
        th1, th2 = self._y[0], self._y[1]
        x1, y1 = self._l1 * math.sin(th1), self._l1 * math.cos(th1)
        x2, y2 = x1 + self._l2 * math.sin(th2), y1 + self._l2 * math.cos(th2)
        for k, (tx, ty) in enumerate(self._trace):
            c = QColor(40, 110, 220)
            c.setAlpha(int(200 * (k + 1) / len(self._trace)))
            p.setPen(QPen(c, 2))
            p.drawPoint(pt(tx, ty))
        p.setPen(QPen(QColor(40, 40, 40), 3))
        p.drawLine(pt(0, 0), pt(x1, y1))
        p.drawLine(pt(x1, y1), pt(x2, y2))
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QBrush(QColor(30, 30, 30)))
        p.drawEllipse(pt(0, 0), 4, 4)
        p.setBrush(QBrush(QColor(220, 90, 40)))
        p.drawEllipse(pt(x1, y1), 9, 9)
        p.setBrush(QBrush(QColor(40, 110, 220)))
        p.drawEllipse(pt(x2, y2), 9, 9)
        p.end()


class StateView(QWidget):
    """Fallback view: the latest info values as text."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._label = QLabel("no live view for this source", self)
        self._label.setWordWrap(True)
        QVBoxLayout(self).addWidget(self._label)

    def update_info(self, info: dict[str, Any]) -> None:
        """Show the scalar entries of the source's info."""
        parts = [f"{k}: {v:.4g}" for k, v in info.items() if isinstance(v, float | int)
                 and not isinstance(v, bool)]
        if parts:
            self._label.setText("\n".join(parts))


class NoGL(RuntimeError):
    """No OpenGL context could be created for MuJoCo's offscreen renderer."""


def _display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) or \
        platform.system() in ("Darwin", "Windows")


def gl_backends() -> list[str]:
    """GL backends to try, in order: IDT_DESK_RENDER's, else MUJOCO_GL's, else the platform's.

    On Linux EGL first (GPU-accelerated where there is one, Mesa's software rasteriser
    elsewhere, no display needed), then OSMesa (Debian's ``libosmesa6``), then GLFW (needs a
    display). Raises :class:`NoGL` when rendering is switched off.
    """
    forced = os.environ.get(RENDER_ENV, "").strip().lower()
    if forced == "skeleton":
        raise NoGL(f"{RENDER_ENV}=skeleton")
    if forced in _GL_BACKENDS:
        return [forced]
    gl = os.environ.get("MUJOCO_GL", "").strip().lower()
    if gl in _GL_OFF:
        raise NoGL(f"MUJOCO_GL={gl} disables rendering")
    if gl in _GL_BACKENDS:
        return [gl]
    system = platform.system()
    if system == "Darwin":
        return ["cgl", "glfw"]
    if system != "Linux":
        return ["glfw"]
    # PyOpenGL serves one platform per process: once chosen, only that one can work.
    pyopengl = os.environ.get("PYOPENGL_PLATFORM", "").strip().lower()
    if pyopengl in ("egl", "osmesa"):
        return [pyopengl, "glfw"]
    return ["egl", "osmesa", "glfw"]


def _context_class(name: str) -> Any:
    """MuJoCo's GLContext class of one backend (ImportError / NoGL when it cannot work)."""
    if name == "egl":
        if ctypes.util.find_library("EGL") is None:
            raise NoGL("libEGL not found")
        from mujoco.egl import GLContext
    elif name == "osmesa":
        if ctypes.util.find_library("OSMesa") is None:
            raise NoGL("libOSMesa not found (Debian/Ubuntu: apt install libosmesa6)")
        from mujoco.osmesa import GLContext
    elif name == "glfw":
        if not _display():
            raise NoGL("no display")
        from mujoco.glfw import GLContext
    else:
        from mujoco.cgl import GLContext
    return GLContext


def _software_gl(name: str) -> bool:
    """Whether the current context rasterises on the CPU (OSMesa, llvmpipe)."""
    if name == "osmesa":
        return True
    if name == "egl":
        try:
            from OpenGL import GL

            text = (GL.glGetString(GL.GL_RENDERER) or b"").decode(errors="replace").lower()
        except Exception:  # no answer: assume the cheap settings
            return True
        return any(k in text for k in ("llvmpipe", "softpipe", "swrast", "software"))
    return False


class OffscreenRenderer:
    """MuJoCo's offscreen renderer on a GL backend chosen at run time (see gl_backends).

    Made and used on one thread (a GL context is current on the thread that made it);
    :meth:`close` frees the MuJoCo and GL contexts on that thread. On a software rasteriser
    shadows, reflections and multisampling are off (about 10 times faster at 320×240).
    """

    def __init__(self, model: Any, width: int = RENDER_MAX, height: int = RENDER_MAX) -> None:
        import mujoco

        self.mujoco = mujoco
        self.model, self.width, self.height = model, width, height
        # The offscreen buffer holds the largest image asked for; each render uses part of it.
        model.vis.global_.offwidth = max(int(model.vis.global_.offwidth), width)
        model.vis.global_.offheight = max(int(model.vis.global_.offheight), height)
        self.ctx: Any = None
        self.con: Any = None
        reasons = []
        for name in gl_backends():
            ctx = None
            try:
                ctx = _context_class(name)(width, height)
                if name == "glfw" and not getattr(ctx, "_context", None):
                    raise NoGL("GLFW could not open a hidden window")
                ctx.make_current()
                self.software = _software_gl(name)
                if self.software:
                    model.vis.quality.offsamples = 0
                con = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_100)
            except Exception as exc:  # any failure: try the next backend
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                reasons.append(f"{name}: {first or type(exc).__name__}")
                if ctx is not None:
                    with contextlib.suppress(Exception):
                        ctx.free()
                continue
            self.ctx, self.con, self.backend = ctx, con, name
            break
        if self.con is None:
            raise NoGL("; ".join(reasons) or "no GL backend")
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self.con)
        self.scene = mujoco.MjvScene(model, maxgeom=1000)
        self.option = mujoco.MjvOption()
        self.perturb = mujoco.MjvPerturb()
        self.full_quality = not self.software
        self.set_quality(self.full_quality)

    def set_quality(self, full: bool) -> None:
        """Shadows and reflections on (full) or off (cheap)."""
        flags = self.mujoco.mjtRndFlag
        self.full_quality = full
        self.scene.flags[flags.mjRND_SHADOW] = full
        self.scene.flags[flags.mjRND_REFLECTION] = full

    def render(self, data: Any, camera: Any, width: int, height: int) -> np.ndarray:
        """An RGB image (height, width, 3), top row first, of ``data`` seen from ``camera``."""
        mj = self.mujoco
        width, height = min(width, self.width), min(height, self.height)
        self.ctx.make_current()
        mj.mjv_updateScene(self.model, data, self.option, self.perturb, camera,
                           mj.mjtCatBit.mjCAT_ALL, self.scene)
        rect = mj.MjrRect(0, 0, width, height)
        mj.mjr_render(rect, self.scene, self.con)
        rgb = np.empty((height, width, 3), np.uint8)
        mj.mjr_readPixels(rgb, None, rect, self.con)
        return np.ascontiguousarray(rgb[::-1])

    def close(self) -> None:
        """Free the MuJoCo render context and the GL context (on the thread that made them)."""
        if self.con is not None:
            self.con.free()
            self.con = None
        if self.ctx is not None:
            self.ctx.free()
            self.ctx = None


def load_model(env_id: str) -> Any:
    """The MjModel of a Gymnasium MuJoCo environment (its own copy, not the source's)."""
    import gymnasium

    from idt_desk.plugin import route_mujoco_warnings

    route_mujoco_warnings()  # the XML's deprecated attribute: a debug line, not stderr
    env = gymnasium.make(env_id)
    try:
        model = env.unwrapped.model
    except AttributeError:
        env.close()
        raise NoGL(f"{env_id} is not a MuJoCo environment") from None
    env.close()
    return model


class RenderWorker:
    """Renders the latest handed-over MuJoCo state on its own thread (``idt-render``).

    The GUI thread calls :meth:`submit` with copies of qpos / qvel; the thread takes only
    the newest one, runs ``mj_forward`` on its own MjData and renders it, at most
    ``fps`` frames a second and at most half of one core (it sleeps at least as long as a
    frame took), so the session's loop is never slowed; :meth:`latest` returns the newest
    finished frame. ``state``: starting, rendering, failed (``error`` says why), stopped.
    """

    def __init__(self, env_id: str, size: tuple[int, int] = RENDER_SIZE,
                 fps: float = RENDER_FPS, model_loader: Any = load_model) -> None:
        self.env_id, self.size, self.interval = env_id, tuple(size), 1.0 / fps
        #: Draw a planar runner's x modulo FLOOR_PERIOD (its first joint is the root slide).
        self.wrap_x = env_id.lower().startswith("halfcheetah")
        #: Size of the newest frame.
        self.rendered_size = (0, 0)
        self._load = model_loader
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._pending: tuple[int, np.ndarray, np.ndarray | None] | None = None
        self._frame: np.ndarray | None = None
        self.frame_id = 0
        #: States handed over so far, and the number of the one the newest frame shows.
        self.submitted = 0
        self.shows = 0
        self.state = "starting"
        self.error = ""
        self.backend = ""
        self.fps = 0.0
        self.frame_ms = 0.0
        self.thread = threading.Thread(target=self._run, name="idt-render", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self.thread.start()

    def submit(self, qpos: np.ndarray, qvel: np.ndarray | None = None) -> None:
        """Hand over the newest state (replacing one not yet rendered)."""
        with self._lock:
            self.submitted += 1
            self._pending = (self.submitted, np.array(qpos, dtype=float),
                             None if qvel is None else np.array(qvel, dtype=float))
        self._wake.set()

    def set_size(self, width: int, height: int) -> None:
        """Size of the next frames (at most RENDER_MAX each way)."""
        self.size = (max(16, min(int(width), RENDER_MAX)), max(16, min(int(height), RENDER_MAX)))

    def latest(self) -> tuple[int, np.ndarray | None]:
        """(frame number, newest finished frame)."""
        with self._lock:
            return self.frame_id, self._frame

    def idle(self) -> bool:
        """Whether the newest frame shows the newest state handed over."""
        with self._lock:
            return self._pending is None and self.shows == self.submitted

    def stop(self, wait: float | None = 5.0) -> None:
        """Stop the thread; it closes the renderer itself. Joins up to ``wait`` seconds."""
        self._stop.set()
        self._wake.set()
        if wait and self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(wait)

    def _run(self) -> None:
        renderer = None
        try:
            import mujoco

            model = self._load(self.env_id)
            if self._stop.is_set():
                return
            renderer = OffscreenRenderer(model)
            self.backend = renderer.backend
            data = mujoco.MjData(model)
            camera = _tracking_camera(mujoco, model)
            self.state = "rendering"
            self._loop(renderer, data, camera)
        except Exception as exc:  # any failure means: draw the skeleton
            text = str(exc).strip() or type(exc).__name__
            self.error = text
            self.state = "failed"
        finally:
            if renderer is not None:
                renderer.close()
            if self.state != "failed":
                self.state = "stopped"

    def _loop(self, renderer: OffscreenRenderer, data: Any, camera: Any) -> None:
        import mujoco

        times: list[float] = []
        shown: list[float] = []
        while not self._stop.is_set():
            self._wake.wait(0.25)
            self._wake.clear()
            with self._lock:
                pending, self._pending = self._pending, None
            if pending is None or self._stop.is_set():
                continue
            number, qpos, qvel = pending
            t0 = time.perf_counter()
            n = min(len(qpos), data.qpos.size)
            data.qpos[:n] = qpos[:n]
            if self.wrap_x:
                # The floor is a finite plane (±40 m for HalfCheetah) and an episode runs
                # ~90 m: draw the body over the floor's tiles (the scene does not depend on
                # x), not in the void beyond its edge.
                data.qpos[0] = math.remainder(float(data.qpos[0]), FLOOR_PERIOD)
            if qvel is not None:
                m = min(len(qvel), data.qvel.size)
                data.qvel[:m] = qvel[:m]
            mujoco.mj_forward(renderer.model, data)
            w, h = self.size
            # A narrow (tall) image sees less across: step back to keep the body in view.
            camera.distance = CAMERA_DISTANCE * max(1.0, math.sqrt((4 / 3) / (w / h)))
            frame = renderer.render(data, camera, w, h)
            self.rendered_size = (frame.shape[1], frame.shape[0])
            dt = time.perf_counter() - t0
            with self._lock:
                self._frame = frame
                self.frame_id += 1
                self.shows = number
            times.append(dt)
            now = time.monotonic()
            shown.append(now)
            shown[:] = [t for t in shown if now - t <= 2.0]
            if len(shown) > 1:
                self.fps = (len(shown) - 1) / max(shown[-1] - shown[0], 1e-9)
            self.frame_ms = 1e3 * float(np.median(times[-15:]))
            if renderer.full_quality and len(times) >= 8 and \
                    float(np.median(times[-8:])) > 0.6 * self.interval:
                renderer.set_quality(False)  # too slow for the frame rate: cheap settings
            # At most `fps` frames a second, and never more than half of one core.
            self._stop.wait(max(self.interval - dt, dt))


#: HalfCheetah's floor is an 80 m plane with its checker texture repeated 60 times: 20 m is a
#: whole number of repeats (15), so x drawn modulo 20 m keeps the pattern continuous.
FLOOR_PERIOD = 80.0 / 60.0 * 15

#: The tracking camera's distance (m) at a 4:3 image.
CAMERA_DISTANCE = 3.2


def _tracking_camera(mujoco: Any, model: Any) -> Any:
    """A side camera that follows the torso (or the first body)."""
    cam = mujoco.MjvCamera()
    cam.type = mujoco.mjtCamera.mjCAMERA_TRACKING
    torso = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "torso")
    cam.trackbodyid = torso if torso > 0 else min(1, model.nbody - 1)
    cam.distance = CAMERA_DISTANCE
    cam.azimuth = 90.0
    cam.elevation = -12.0
    return cam


#: Colours of the skeleton: back leg, front leg, torso.
_SKEL = {"b": QColor(200, 95, 40), "f": QColor(40, 110, 220), "": QColor(45, 45, 50)}


class _CheetahCanvas(QWidget):
    """Paints the newest rendered frame, or the 2-D skeleton from body positions."""

    def __init__(self, view: CheetahView) -> None:
        super().__init__(view)
        self.v = view
        self.setMinimumSize(220, 160)

    def render_size(self) -> tuple[int, int]:
        """The render size for this canvas: its aspect (0.75 to 2), RENDER_PIXELS pixels."""
        aspect = min(max(self.width() / max(self.height(), 1), 0.75), 2.0)
        h = math.sqrt(RENDER_PIXELS / aspect)
        return int(round(aspect * h / 4) * 4), int(round(h / 4) * 4)

    def resizeEvent(self, event: Any) -> None:
        """Ask the renderer for frames of the new shape."""
        super().resizeEvent(event)
        if self.v.worker is not None:
            self.v.worker.set_size(*self.render_size())

    def paintEvent(self, event: Any) -> None:
        """Draw the frame (scaled, aspect kept) or the skeleton."""
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        p.fillRect(self.rect(), QColor(250, 250, 252))
        img = self.v.image
        if img is not None and self.v.mode == "render":
            w, h = self.width(), self.height()
            s = min(w / img.width(), h / img.height())
            dw, dh = img.width() * s, img.height() * s
            p.drawImage(QRectF((w - dw) / 2, (h - dh) / 2, dw, dh), img)
        else:
            self._skeleton(p)
        p.end()

    def _skeleton(self, p: QPainter) -> None:
        v = self.v
        w, h = self.width(), self.height()
        if v.body_xz is None:
            p.setPen(QPen(QColor(120, 120, 120)))
            p.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "waiting for data")
            return
        # Camera follows the torso: at least 2.6 m across and 1.6 m up, z = 0.45 m (about the
        # torso's height) in the middle.
        cx = v.centre_x
        scale = min(w / 2.6, h / 1.6)
        gy = h / 2 + 0.45 * scale

        def pt(x: float, z: float) -> QPointF:
            return QPointF(w / 2 + scale * (x - cx), gy - scale * z)

        p.fillRect(QRectF(0, gy, w, h - gy), QColor(236, 237, 240))
        p.setPen(QPen(QColor(150, 150, 150), 2))
        p.drawLine(QPointF(0, gy), QPointF(w, gy))
        p.setPen(QPen(QColor(175, 175, 175), 1))
        half = w / (2 * scale)
        # Ground ticks every 0.5 m, fixed to the world: they scroll as the cheetah runs.
        for k in range(math.floor((cx - half) / 0.5), math.ceil((cx + half) / 0.5) + 1):
            x0 = pt(0.5 * k, 0.0)
            p.drawLine(x0, QPointF(x0.x() - 8, gy + 8))
        root = v.root
        for (i, j), (a, b) in zip(v.segment_ids, v.segments, strict=True):
            # The torso's own segments (to the hips) dark, each leg in its colour.
            name = v.body_names[i] if i < len(v.body_names) and j != root else ""
            color = _SKEL.get(name[:1], _SKEL[""])
            p.setPen(QPen(color, max(4.0, 0.05 * scale), Qt.PenStyle.SolidLine,
                          Qt.PenCapStyle.RoundCap))
            p.drawLine(pt(*a), pt(*b))
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QBrush(QColor(30, 30, 30)))
        for x, z in v.body_xz[1:]:
            p.drawEllipse(pt(float(x), float(z)), 3.5, 3.5)


class CheetahView(QWidget):
    """A MuJoCo robot (HalfCheetah) live: rendered offscreen, or a 2-D skeleton without GL.

    :meth:`update_info` takes the source's info (``env_id``, ``qpos``, ``qvel``,
    ``body_xz``, ``body_parent``, ``body_names``, episode counters); it hands copies of the
    state to a :class:`RenderWorker` (thread ``idt-render``) and shows its newest finished
    frame; until the first frame, or when no GL context can be made (or
    ``IDT_DESK_RENDER=skeleton``), it draws the skeleton: a line from every body to its
    parent, the ground, the camera following the torso. The caption says which is shown.
    Call :meth:`close_view` when the view goes (stops the thread, frees the renderer).
    """

    def __init__(self, parent: QWidget | None = None, render: bool | None = None) -> None:
        super().__init__(parent)
        if render is None:
            render = os.environ.get(RENDER_ENV, "").strip().lower() != "skeleton"
        self.want_render = render
        self.mode = "skeleton"
        self.worker: RenderWorker | None = None
        self.image: QImage | None = None
        self._frame_id = 0
        self._qpos: np.ndarray | None = None
        self.body_xz: np.ndarray | None = None
        self.body_parent: list[int] = []
        self.body_names: list[str] = []
        self.segment_ids: list[tuple[int, int]] = []
        self.segments: list[tuple[tuple[float, float], tuple[float, float]]] = []
        self.centre_x = 0.0
        self.root = 1
        self.frames_shown = 0
        self.caption_reason = "" if render else f"{RENDER_ENV}=skeleton"
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        self.text = QLabel("waiting for data", self)
        self.text.setObjectName("cheetah_text")
        self.text.setMinimumWidth(1)  # never widens the column; two short lines
        self.text.setMinimumHeight(2 * self.text.fontMetrics().lineSpacing())
        self.canvas = _CheetahCanvas(self)
        self.caption = QLabel("", self)
        self.caption.setObjectName("cheetah_caption")
        self.caption.setWordWrap(True)
        small = QFont(self.caption.font())
        small.setPointSizeF(max(small.pointSizeF() - 1.5, 6.5))
        self.caption.setFont(small)
        self.caption.setStyleSheet("QLabel { color: #6b7079; }")
        lay.addWidget(self.text)
        lay.addWidget(self.canvas, 1)
        lay.addWidget(self.caption)
        self.poll = QTimer(self)
        self.poll.setInterval(33)
        self.poll.timeout.connect(self._poll)
        self._set_caption()

    # -- data -------------------------------------------------------------------------------

    def update_info(self, info: dict[str, Any]) -> None:
        """Take the source's latest info (GUI thread): redraw the skeleton, hand over qpos."""
        xz = info.get("body_xz")
        if xz is not None:
            self._set_bodies(np.asarray(xz, dtype=float), info)
        text = self._describe(info)
        if text != self.text.text():
            self.text.setText(text)
        qpos = info.get("qpos")
        env_id = info.get("env_id")
        if qpos is not None and env_id and self.want_render:
            if self.worker is not None and self.worker.env_id != env_id:
                self._stop_worker()
            if self.worker is None and self.mode != "failed":
                self.worker = RenderWorker(str(env_id), self.canvas.render_size())
                self.worker.start()
                self.poll.start()
            if self.worker is not None and (self._qpos is None or
                                            not np.array_equal(self._qpos, qpos)):
                self._qpos = np.array(qpos, dtype=float)
                self.worker.submit(self._qpos, info.get("qvel"))
                if not self.poll.isActive():
                    self.poll.start()
        self._poll()
        if self.mode != "render":
            self.canvas.update()

    def _set_bodies(self, xz: np.ndarray, info: dict[str, Any]) -> None:
        parent = info.get("body_parent")
        if parent is not None:
            self.body_parent = [int(k) for k in parent]
        names = info.get("body_names")
        if names is not None:
            self.body_names = [str(n) for n in names]
        self.body_xz = xz
        self.segment_ids = [(i, j) for i, j in enumerate(self.body_parent[:len(xz)])
                            if i > 0 and 0 < j < len(xz)]
        self.segments = [((float(xz[i, 0]), float(xz[i, 1])), (float(xz[j, 0]), float(xz[j, 1])))
                         for i, j in self.segment_ids]
        torso = self.body_names.index("torso") if "torso" in self.body_names else 1
        self.root = min(torso, len(xz) - 1)
        self.centre_x = float(xz[self.root, 0])

    @staticmethod
    def _describe(info: dict[str, Any]) -> str:
        """Two short lines: episode and step; running return and forward velocity."""
        first, second = [], []
        if "episode" in info:
            first.append(f"episode {int(info['episode'])}")
        if "episode_step" in info:
            first.append(f"step {int(info['episode_step'])}")
        if "episode_return" in info:
            second.append(f"return {float(info['episode_return']):,.1f}")
        if "forward_velocity" in info:
            second.append(f"v = {float(info['forward_velocity']):+.2f} m/s")
        lines = [" · ".join(x) for x in (first, second) if x]
        return "\n".join(lines) or "waiting for data"

    # -- the render thread ------------------------------------------------------------------

    def _poll(self) -> None:
        """Show the newest finished frame; fall back to the skeleton when GL failed."""
        wk = self.worker
        if wk is None:
            return
        if wk.state == "failed":
            self.mode = "failed"
            self.caption_reason = wk.error
            self.image = None
            self._stop_worker()
            self._set_caption()
            self.canvas.update()
            return
        fid, frame = wk.latest()
        if frame is not None and fid != self._frame_id:
            self._frame_id = fid
            h, w, _ = frame.shape
            self.image = QImage(frame.data, w, h, 3 * w, QImage.Format.Format_RGB888).copy()
            self.mode = "render"
            self.frames_shown += 1
            self.canvas.update()
        self._set_caption()
        if wk.state == "rendering" and wk.idle() and fid == self._frame_id:
            self.poll.stop()  # nothing in flight: the next update_info restarts it

    def _set_caption(self) -> None:
        wk = self.worker
        if self.mode == "render" and wk is not None:
            w, h = wk.rendered_size
            fps = f" · {wk.fps:.0f} frames/s" if wk.fps > 0 else ""
            text = f"MuJoCo render ({wk.backend}) · {w}×{h}{fps}"
            tip = (f"Rendered offscreen on its own thread from a copy of the state "
                   f"(median {wk.frame_ms:.0f} ms a frame, at most {RENDER_FPS:.0f} frames/s)")
        elif self.mode == "failed":
            reason = self.caption_reason.splitlines()[0] if self.caption_reason else "?"
            short = reason if len(reason) <= 90 else reason[:87] + "…"
            text = f"skeleton: no OpenGL: {short}"
            tip = ("MuJoCo's offscreen renderer could not start:\n" + self.caption_reason +
                   "\n\nOn Linux without a GPU install Mesa's OSMesa (Debian/Ubuntu: "
                   "libosmesa6) or EGL; MUJOCO_GL picks the backend.")
        elif not self.want_render:
            text, tip = f"skeleton ({self.caption_reason})", "Rendering is switched off"
        elif wk is not None:
            text, tip = "skeleton: starting the MuJoCo renderer…", ""
        else:
            text, tip = "skeleton (from body positions)", ""
        if text != self.caption.text():
            self.caption.setText(text)
        if tip != self.caption.toolTip():
            self.caption.setToolTip(tip)

    def _stop_worker(self) -> None:
        self.poll.stop()
        if self.worker is not None:
            self.worker.stop()
            self.worker = None
        self._qpos = None

    def reset(self) -> None:
        """A new session: forget the last state (the renderer stays)."""
        self._qpos = None
        self.body_xz = None
        self.segments, self.segment_ids = [], []
        self.image = None
        if self.mode == "render":
            self.mode = "skeleton"
        self.text.setText("waiting for data")
        self.canvas.update()

    def close_view(self) -> None:
        """Stop the render thread and free the renderer (the view is going)."""
        self._stop_worker()
        if self.mode == "render":
            self.mode = "skeleton"

    def closeEvent(self, event: Any) -> None:
        """Stop the thread when the view itself is closed."""
        self.close_view()
        super().closeEvent(event)


VIEWS: dict[str, type[QWidget]] = {"pendulum": PendulumView, "cheetah": CheetahView,
                                    "dialogue": TranscriptView, "replay": ReplayView}


def make_view(name: str, parent: QWidget | None = None) -> QWidget:
    """The live view registered for a source's ``view`` name (or the fallback)."""
    return VIEWS.get(name, StateView)(parent)
