"""Ctrl-C for a long command (``kvreach prove``): within a second, one line
on stderr, the worker processes killed, exit 130, whatever the main thread is
doing at the time (inside a Z3 call as well).

How: SIGINT gets a no-op Python handler and a wakeup fd
(``signal.set_wakeup_fd``); a daemon thread waits on that fd. The C-level
handler writes the signal number there even while the main thread is inside
Z3 (ctypes releases the GIL), so the thread wakes at once, kills every
``multiprocessing`` child, writes the line and ends the process with
``os._exit(130)``. Z3's own Ctrl-C handling (which would turn the interrupt
into an ``unknown`` verdict and carry on) is switched off.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable


class ExitOnInterrupt:
    """``with ExitOnInterrupt(lambda: "interrupted: ..."):`` -- on Ctrl-C, the
    message (it should start with ``interrupted``) on stderr and exit 130."""

    def __init__(self, message: Callable[[], str], before_exit: Callable[[], None] | None = None):
        self.message, self.before_exit = message, before_exit

    def __enter__(self) -> ExitOnInterrupt:
        import z3

        self._active = threading.current_thread() is threading.main_thread()
        if not self._active:  # signals can only be handled on the main thread
            return self

        z3.set_param("ctrl_c", False)  # the interrupt is ours, not the solver's
        self._r, self._w = socket.socketpair()
        self._w.setblocking(False)
        self._old_fd = signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)
        self._old_handler = signal.signal(signal.SIGINT, lambda *_: None)
        threading.Thread(target=self._watch, name="kvreach-interrupt", daemon=True).start()
        return self

    def _watch(self) -> None:
        while True:
            try:
                data = self._r.recv(16)
            except OSError:
                return
            if not data:  # closed by __exit__
                return
            if signal.SIGINT in data:
                break
        for p in multiprocessing.active_children():
            try:
                p.kill()
            except Exception:  # noqa: BLE001  (already gone)
                pass
        _release_semaphores()
        try:
            if self.before_exit is not None:
                self.before_exit()
            sys.stderr.write(self.message() + "\n")
            sys.stderr.flush()
        finally:
            os._exit(130)

    def __exit__(self, *exc) -> None:
        if not self._active:
            return
        signal.signal(signal.SIGINT, self._old_handler)
        signal.set_wakeup_fd(self._old_fd)
        self._w.close()
        self._r.close()


def _release_semaphores() -> None:
    """Unlink the pool's named semaphores as a normal exit would (their
    finalizers), so that multiprocessing's resource tracker has nothing left
    to warn about after ``os._exit``."""
    try:
        from multiprocessing import synchronize, util

        for f in list(util._finalizer_registry.values()):  # noqa: SLF001
            if getattr(f, "_callback", None) is synchronize.SemLock._cleanup:  # noqa: SLF001
                f()
    except Exception:  # noqa: BLE001  (best effort: at worst, the tracker's warning)
        pass
