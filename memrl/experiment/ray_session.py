"""Starting an embedded local Ray, or joining a cluster, the same way for every memrl command.

Token authentication: Ray 2.60 turns it on by default for a local ``ray.init()`` and then writes a
token to ``~/.ray/auth_token``. memrl decides explicitly instead (``RAY_AUTH_MODE``):

- embedded (no address): unless the user set ``RAY_AUTH_MODE``, token auth is on with a fresh random
  token held only in this process's environment (``RAY_AUTH_TOKEN``), inherited by Ray's workers; so
  the local Ray is protected and nothing is written to the home directory;
- joining (``--address`` or ``RAY_ADDRESS``): the user's ``RAY_AUTH_MODE`` / ``RAY_AUTH_TOKEN`` /
  ``RAY_AUTH_TOKEN_PATH`` are used as they are; they must match the cluster's (see README).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RayInfo:
    """What the session is connected to."""

    embedded: bool
    """True when memrl started this Ray itself."""
    address: str
    """The GCS address."""
    cpus: float
    """CPUs the Ray instance has in total."""
    gpus: float
    """GPUs the Ray instance has in total."""
    temp_dir: str | None
    """The embedded Ray's temp/session dir (None when joined)."""


@contextlib.contextmanager
def ray_session(
    address: str | None = None,
    *,
    num_cpus: int | None = None,
    dashboard: bool = False,
    keep_temp_on_error: bool = True,
) -> Iterator[RayInfo]:
    """Starts (or joins) Ray for the duration of a ``with`` block, and shuts it down after.

    Args:
        address: a cluster to join ("auto", "host:port", "ray://..."); None reads ``RAY_ADDRESS``
            and, if that is unset too, starts an embedded Ray on this machine.
        num_cpus: CPUs of the embedded Ray (default: all of this machine's).
        dashboard: start the dashboard of the embedded Ray.
        keep_temp_on_error: keep the embedded Ray's temp dir (its logs) when the block raises
            (not for ValueError, TypeError or FileNotFoundError, mistakes in the input, nor for
            KeyboardInterrupt).
    """
    import ray

    address = address or os.environ.get("RAY_ADDRESS") or None
    if ray.is_initialized():
        res = ray.cluster_resources()
        yield RayInfo(
            False, "(already initialized)", res.get("CPU", 0.0), res.get("GPU", 0.0), None
        )
        return
    temp_dir = None
    failed = False
    saved_env = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    try:
        if address:
            logger.info("joining Ray cluster at %s", address)
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
        else:
            os.environ.setdefault("RAY_AUTH_MODE", "token")
            if os.environ["RAY_AUTH_MODE"].lower() == "token" and not (
                os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
            ):
                os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
            # Ray caches its config and the token it loaded first (perhaps another Ray's, in a
            # process that started several): make it re-read RAY_AUTH_MODE and the token.
            from ray._raylet import AuthenticationTokenLoader, Config

            Config.initialize("")
            AuthenticationTokenLoader.instance().reset_cache()
            # Short path: Ray's unix sockets live under it (108-byte limit).
            temp_dir = tempfile.mkdtemp(prefix="memrl-ray-")
            ray.init(
                num_cpus=num_cpus,
                include_dashboard=dashboard,
                _temp_dir=temp_dir,
                logging_level=logging.WARNING,
                log_to_driver=True,
                configure_logging=True,
            )
        res = ray.cluster_resources()
        ctx = ray.get_runtime_context()
        yield RayInfo(
            embedded=address is None,
            address=getattr(ctx, "gcs_address", "") or "",
            cpus=res.get("CPU", 0.0),
            gpus=res.get("GPU", 0.0),
            temp_dir=temp_dir,
        )
    except (ValueError, TypeError, FileNotFoundError, KeyboardInterrupt):
        # A mistake in the input, said by the error itself, or the user's Ctrl-C: Ray's logs
        # add nothing (the run's own checkpoints and metrics live in its output dir).
        raise
    except BaseException:
        failed = True
        raise
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for key, value in saved_env.items():  # the token lived as long as this Ray
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if not address:
            # Ray keeps the auth mode and the token it loaded for the process's life: make it
            # forget ours, so that a later plain ray.init() in this process (a test, a notebook)
            # uses the restored environment instead of a token nothing else has.
            from ray._raylet import AuthenticationTokenLoader, Config

            Config.initialize("")
            AuthenticationTokenLoader.instance().reset_cache()
        if temp_dir:
            if failed and keep_temp_on_error:
                logger.warning("Ray's logs of this run are kept in %s", temp_dir)
            else:
                shutil.rmtree(temp_dir, ignore_errors=True)
