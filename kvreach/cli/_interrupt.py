"""Ctrl-C, SIGTERM and SIGHUP for a long command (``kvreach prove``,
``kvreach counterexample``): within a second, one line on stderr, the worker
processes killed, exit 128 + the signal's number (130 for SIGINT, 143 for
SIGTERM, 129 for SIGHUP, as a shell reports a process the signal ended),
whatever the main thread is doing at the time (inside a Z3 call as well).

How: each of the three signals gets a no-op Python handler and a wakeup fd
(``signal.set_wakeup_fd``); a daemon thread waits on that fd. The C-level
handler writes the signal number there even while the main thread is inside
Z3 (ctypes releases the GIL), so the thread wakes at once, kills every
``multiprocessing`` child, writes the line and ends the process with
``os._exit``. Z3's own Ctrl-C handling (which would turn the interrupt
into an ``unknown`` verdict and carry on) is switched off. The pool's
workers ignore the three signals (the parent ends them) and die with the
parent when it is killed outright (``kvreach.proofs.pool``).

Killing the workers breaks the pool, so the main thread may raise
(``BrokenProcessPool``) while the watcher is still on its way to the line.
An exception that leaves the block once a signal has arrived is therefore
not reported: ``__exit__`` waits for the watcher, which ends the process
(without the wait, an ``internal error (BrokenProcessPool ...)`` line could
come before the ``interrupted`` one).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# How long an exception leaving the block waits for a signal that may be
# arriving with it (a worker the signal ended breaks the pool as the signal
# reaches this process). A real error costs this much more; it is not a
# limit on anything the run computes.
_GRACE_S = 1.0


def exit_code(signum: int) -> int:
    """The exit status of a process a signal ended, as a shell reports it."""
    return 128 + signum


class ExitOnInterrupt:
    """``with ExitOnInterrupt(lambda: "interrupted: ..."):`` -- on Ctrl-C,
    SIGTERM or SIGHUP, the message (it should start with ``interrupted``) on
    stderr and exit :func:`exit_code` of the signal."""

    def __init__(self, message: Callable[[], str], before_exit: Callable[[], None] | None = None):
        self.message, self.before_exit = message, before_exit

    def __enter__(self) -> ExitOnInterrupt:
        import z3

        self._active = threading.current_thread() is threading.main_thread()
        if not self._active:  # signals can only be handled on the main thread
            return self

        self._signalled = threading.Event()
        z3.set_param("ctrl_c", False)  # the interrupt is ours, not the solver's
        self._r, self._w = socket.socketpair()
        self._w.setblocking(False)
        self._old_fd = signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)
        self._old_handlers = {s: signal.signal(s, lambda *_: None) for s in STOP_SIGNALS}
        threading.Thread(target=self._watch, name="kvreach-interrupt", daemon=True).start()
        return self

    def _watch(self) -> None:
        signum = None
        while signum is None:
            try:
                data = self._r.recv(16)
            except OSError:
                return
            if not data:  # closed by __exit__
                return
            signum = next((s for s in data if s in STOP_SIGNALS), None)
        self._signalled.set()  # before the kill: the broken pool it causes is ours
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
        except Exception:  # noqa: BLE001  (a hung-up terminal: no line, the same exit)
            pass
        finally:
            os._exit(exit_code(signum))

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._active:
            return
        if exc_type is not None and self._signalled.wait(_GRACE_S):
            threading.Event().wait()  # the watcher ends the process (os._exit)
        for s, h in self._old_handlers.items():
            signal.signal(s, h)
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
