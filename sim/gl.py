"""RenderThread: the one thread that owns a world's OpenGL contexts.

An OpenGL context is current in at most one thread, and EGL refuses to make a context current
in a second thread while the first still holds it (``EGL_BAD_ACCESS`` from ``eglMakeCurrent``).
MuJoCo's ``Renderer`` makes its context current in the thread that creates it and again at
every ``render()``, so a renderer created in one thread and used from another (the twin node
renders from whichever executor thread serves ``sim/step``, or from its pacing thread) works
with OSMesa but fails with EGL.

So every call that touches a context (creating a renderer, ``update_scene`` + ``render``,
``close``) runs on one dedicated thread per :class:`sim.world.SimWorld`, whatever thread asks:
:meth:`RenderThread.call` hands the work over and waits for its result. The same code path then
holds under ``MUJOCO_GL=osmesa``, ``egl`` and ``glfw``. The hand-over costs tens of
microseconds against a few milliseconds per frame; the caller blocks meanwhile (it holds the
world's lock, so physics cannot move under the render).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class RenderThread:
    """A daemon thread that runs submitted callables in order (started on first use).

    Args:
        name: Thread name (shows in ``py-spy`` and thread dumps).
    """

    def __init__(self, name: str = "mujoco-gl") -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[tuple[Callable[..., Any], tuple, Future] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, args, fut = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                fut.set_exception(e)

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the render thread and return its result (re-raising its error).

        Raises:
            RuntimeError: The thread was closed.
        """
        if self._thread is not None and threading.current_thread() is self._thread:
            return fn(*args)
        fut: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the render thread is closed (SimWorld.close() was called)")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._jobs.put((fn, args, fut))
        return fut.result()

    def close(self, final: Callable[[], None] | None = None) -> None:
        """Run ``final`` (e.g. free the contexts) on the thread, then stop it. Idempotent."""
        with self._lock:
            if self._closed:
                return
            started = self._thread is not None
        if started and final is not None:
            self.call(final)
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(None)
            if thread is not threading.current_thread():
                thread.join(timeout=5.0)
