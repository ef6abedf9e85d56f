"""Every wait in sigflow, on tenacity: a probe called at a fixed interval until it answers, a
deadline, and an early end when what it waits on has died. The caller says what failed."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import tenacity

T = TypeVar("T")


def wait_until(
    ready: Callable[[], T],
    *,
    timeout_s: float,
    every_s: float,
    give_up: Callable[[], bool] = lambda: False,
    not_yet: tuple[type[BaseException], ...] = (),
    reraise: bool = False,
) -> T | None:
    """Call ``ready`` every ``every_s`` seconds until it returns something true, and return
    that. Past ``timeout_s``, or as soon as ``give_up()`` is true, return None; with
    ``reraise``, raise the last probe's exception instead when it raised one. Exceptions of
    the ``not_yet`` types mean "not ready yet"; any other propagates at once."""

    def stop(state: tenacity.RetryCallState) -> bool:
        return (state.seconds_since_start or 0.0) >= timeout_s or give_up()

    def out_of_time(state: tenacity.RetryCallState) -> T | None:
        if reraise and state.outcome is not None and state.outcome.failed:
            return state.outcome.result()  # raises the probe's own exception
        return None

    retry = tenacity.retry_if_result(lambda answer: not answer)
    if not_yet:
        retry = retry | tenacity.retry_if_exception_type(not_yet)
    return tenacity.Retrying(
        retry=retry, wait=tenacity.wait_fixed(every_s), stop=stop, retry_error_callback=out_of_time,
    )(ready)
