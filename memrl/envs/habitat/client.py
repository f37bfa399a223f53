"""WorkerProcess: starts the env worker under a given interpreter and makes calls to it.

The two ends talk over a socketpair (the worker inherits its end as a file descriptor); the
worker's stdout and stderr go to a log file whose tail ends up in every error about it.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from memrl.envs.habitat import wire

logger = logging.getLogger(__name__)

WORKER_SCRIPT = Path(__file__).resolve().parent / "worker.py"


class WorkerError(RuntimeError):
    """An exception raised inside the worker by a request; the worker is still running."""

    def __init__(self, error: str, message: str, remote_traceback: str):
        super().__init__(
            f"{error} in the env worker: {message}\n--- worker traceback ---\n{remote_traceback}"
        )
        self.error = error
        self.remote_traceback = remote_traceback


class WorkerCrashedError(RuntimeError):
    """The worker process died, broke the protocol or stopped answering.

    ``HabitatEnv`` starts a fresh worker on the next ``reset()``.
    """


class WorkerProcess:
    """One running worker.

    Args:
        python: interpreter to run the worker with.
        backend: ``"habitat"`` or ``"objnav"``.
        task: keyword arguments of the backend env.
        render_mode: passed to the backend env.
        start_timeout_s: how long starting (hello + make) may take.
        call_timeout_s: how long one reset/step/render may take.
    """

    def __init__(
        self,
        python: str,
        backend: str,
        task: dict[str, Any],
        render_mode: str | None,
        start_timeout_s: float,
        call_timeout_s: float,
    ) -> None:
        self.python = python
        self.backend = backend
        self.call_timeout_s = call_timeout_s
        self.log_path = Path(
            tempfile.NamedTemporaryFile(
                prefix=f"memrl-{backend}-worker-", suffix=".log", delete=False
            ).name
        )
        parent, child = socket.socketpair()
        self._sock = parent
        with open(self.log_path, "wb") as log:
            try:
                self.proc = subprocess.Popen(
                    [python, "-u", str(WORKER_SCRIPT), "--fd", str(child.fileno())],
                    pass_fds=(child.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    close_fds=True,
                )
            finally:
                child.close()
        self.pid = self.proc.pid
        try:
            hello, _ = self._exchange(None, start_timeout_s, "start")
            if hello.get("hello") != wire.HELLO or hello.get("protocol") != wire.PROTOCOL_VERSION:
                raise WorkerCrashedError(
                    f"the worker under {python} speaks {hello.get('hello')!r} protocol "
                    f"{hello.get('protocol')!r}, memrl speaks {wire.HELLO!r} protocol "
                    f"{wire.PROTOCOL_VERSION}: run the worker.py of this memrl checkout"
                )
            self.spaces, _ = self.call(
                {"op": "make", "backend": backend, "task": task, "render_mode": render_mode},
                timeout_s=start_timeout_s,
                what="make",
            )
        except BaseException:
            self.kill()
            raise
        logger.info(
            "env worker pid %d (%s backend, %s) is up; log %s",
            self.pid,
            backend,
            python,
            self.log_path,
        )

    def call(
        self,
        header: dict[str, Any],
        arrays: dict[str, np.ndarray] | None = None,
        timeout_s: float | None = None,
        what: str | None = None,
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Sends one request and returns the reply.

        Raises:
            WorkerError: the request failed inside the worker (the worker lives on).
            WorkerCrashedError: the worker died or timed out (it is killed).
        """
        reply, out = self._exchange(
            (header, arrays), timeout_s or self.call_timeout_s, what or header.get("op", "call")
        )
        if not reply.get("ok"):
            raise WorkerError(
                reply.get("error", "Error"), reply.get("message", ""), reply.get("traceback", "")
            )
        return reply, out

    def _exchange(
        self,
        request: tuple[dict[str, Any], dict[str, np.ndarray] | None] | None,
        timeout_s: float,
        what: str,
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        self._sock.settimeout(timeout_s)
        try:
            if request is not None:
                wire.send(self._sock, *request)
            return wire.recv(self._sock)
        except (OSError, wire.ProtocolError, ValueError) as err:
            timed_out = isinstance(err, TimeoutError | socket.timeout)
            if not timed_out:
                # The socket closes a moment before the process is gone: let it finish exiting
                # so the error can give its real exit status.
                try:
                    self.proc.wait(timeout=2.0)
                except subprocess.TimeoutExpired:
                    pass
            message = self._describe_failure(what, err, timed_out, timeout_s)
            self.kill()
            raise WorkerCrashedError(message) from err

    def _describe_failure(self, what: str, err: Exception, timed_out: bool, timeout: float) -> str:
        code = self.proc.poll()
        if timed_out:
            state = f"did not answer within {timeout:g} s and was killed"
        elif code is None:
            state = f"broke the connection ({type(err).__name__}: {err})"
        elif code < 0:
            state = f"was killed by signal {signal.Signals(-code).name} (exit code {code})"
        else:
            state = f"exited with code {code}"
        return (
            f"env worker pid {self.pid} ({self.backend} backend, {self.python}) {state} during "
            f"{what}. Last lines of its log {self.log_path}:\n{self.log_tail()}\n"
            "The env starts a new worker on the next reset()."
        )

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, timeout_s: float = 10.0) -> None:
        """Asks the worker to exit; kills it if it does not; removes the log."""
        if self.alive():
            try:
                self._sock.settimeout(timeout_s)
                wire.send(self._sock, {"op": "close"})
                wire.recv(self._sock)
                self.proc.wait(timeout=timeout_s)
            except (OSError, wire.ProtocolError, subprocess.TimeoutExpired, ValueError):
                logger.warning("env worker pid %d did not close cleanly; killing it", self.pid)
        self.kill()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass

    def kill(self) -> None:
        """Kills the worker (if running) and closes the socket; keeps the log for errors."""
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            logger.error("env worker pid %d survived SIGKILL for 10 s", self.pid)
        self._sock.close()
