"""How many more bytes the spool may take: the room its disk has, less a reserve kept free.

The spool is bounded by the disk it is on, not by a fixed size (docs/architecture.md, "A bounded
spool"): a call is refused only when appending it would leave less than the reserve free on that
file system, the larger of ``reserve`` (the ``spool_disk_reserve`` limit, 1 GiB by default, but at
most SMALL_DISK_SHARE of a small disk) and RESERVE_FRACTION of it, so a long burst on a slow machine
cannot fill the user's disk. Calls it has no room for wait in memory (bounded, ``Deferred``) and
are dropped and counted beyond that. An optional ``cap`` (the ``max_spool_bytes`` limit) bounds the
unstored bytes below that; calls past it are dropped and counted at once.

``statvfs`` is asked at most every RECHECK seconds, and again whenever the bytes appended since
would use up the room it reported, so a call is never refused on a stale figure.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

RESERVE = 1 << 30  # bytes the spool leaves free on its disk (at least)
RESERVE_FRACTION = 0.05  # ... or this share of the file system, if larger
SMALL_DISK_SHARE = 0.1  # but never more than this share of it (a small disk: a tmpfs, a USB stick)
RECHECK = 0.5  # seconds a free-space figure is trusted for


class SpoolRoom:
    """The free space of the spool's file system, less the reserve, as the spool grows."""

    def __init__(
        self,
        directory: Path,
        *,
        reserve: int = RESERVE,
        cap: int | None = None,
        statvfs: Callable[[Path], os.statvfs_result] = os.statvfs,
    ):
        self.directory, self.reserve, self.cap, self._statvfs = directory, reserve, cap, statvfs
        self._room = 0  # bytes that could be appended when last asked, less those taken since
        self._unwritten = 0  # bytes taken for an append not made yet: the disk does not count them
        self._asked_at: float | None = None
        self.free = 0  # the file system's free bytes, as last asked (for the counters)

    def _ask(self, now: float) -> None:
        try:
            st = self._statvfs(self.directory)
        except OSError:  # cannot tell: only what the cap allows (or nothing), until it can again
            self._room, self.free = 0, 0
        else:
            self.free = st.f_bavail * st.f_frsize
            disk = st.f_blocks * st.f_frsize
            keep = max(min(self.reserve, int(disk * SMALL_DISK_SHARE)), int(disk * RESERVE_FRACTION))
            self._room = max(0, self.free - keep - self._unwritten)
        self._asked_at = now

    def fits(self, size: int, unstored: int, now: float) -> bool:
        """Whether ``size`` more bytes may be appended to a spool holding ``unstored`` bytes."""
        if self.cap is not None and unstored + size > self.cap:
            return False
        if self._asked_at is None or now - self._asked_at >= RECHECK or size > self._room:
            self._ask(now)
        return size <= self._room

    def took(self, size: int) -> None:
        """``size`` bytes are to be appended: that much less room until the disk is asked again."""
        self._room -= size
        self._unwritten += size

    def written(self) -> None:
        """The append was made (or failed): the disk's own figure counts what it took from now on."""
        self._unwritten = 0
