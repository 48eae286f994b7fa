"""Driving the app in tests: async tests without a plugin, and waiting for a frame."""

from __future__ import annotations

import asyncio
import functools


def sync(test):  # noqa: ANN001, ANN201
    """Run an async test with asyncio.run (no pytest async plugin needed)."""

    @functools.wraps(test)
    def run(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return asyncio.run(test(*args, **kwargs))

    return run


async def settle(pilot) -> None:  # noqa: ANN001
    """The workers done and their messages handled (twice: a frame can start another)."""
    for _ in range(2):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
