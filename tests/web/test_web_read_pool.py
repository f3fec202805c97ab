"""The UI's read pool lets go of what its reads built once no read ran for ``release_after`` seconds
(docs/architecture.md, "Memory"): connections closed, caches emptied, once per idle spell, and
never while reads go on."""

from __future__ import annotations

import asyncio
import time

from ctxscope.inspector.pipeline.search_text import SegmentTexts
from ctxscope.web.calldetail import BodyCache
from ctxscope.web.pool import ReadPool

from support.factories import capture, make_exchange


def _count(db) -> int:
    return db.execute("select count(*) from calls").fetchone()[0]


def test_an_idle_pool_closes_its_connections_and_empties_its_caches(tmp_path):
    capture(tmp_path / "c.db", [make_exchange(i) for i in range(3)]).close()
    bodies = BodyCache()

    async def scenario() -> None:
        pool = ReadPool(tmp_path / "c.db", SegmentTexts, release_after=0.3, on_release=[bodies.clear])
        calls = await asyncio.gather(*(pool.run(_count) for _ in range(3)))
        assert calls == [3, 3, 3]
        opened = list(pool._idle)
        bodies._items[("id", "request", "wire")] = b"x" * 1000
        bodies._bytes = 1000
        began = time.monotonic()
        while pool.releases == 0:
            assert time.monotonic() - began < 10, "the idle pool never let go"
            await asyncio.sleep(0.05)
        assert not pool._idle and not bodies._items and bodies._bytes == 0
        for db in opened:  # closed, not only dropped
            try:
                db.execute("select 1")
            except Exception:
                continue
            raise AssertionError("a released connection still answers")
        await asyncio.sleep(0.6)
        assert pool.releases == 1  # one release per idle spell: an idle daemon wakes for nothing
        assert await pool.run(_count) == 3  # the next read opens a connection of its own
        pool.close()

    asyncio.run(scenario())


def test_reads_in_a_row_put_the_release_off(tmp_path):
    capture(tmp_path / "c.db", [make_exchange(1)]).close()

    async def scenario() -> None:
        pool = ReadPool(tmp_path / "c.db", SegmentTexts, release_after=0.4)
        for _ in range(8):  # a read every 0.1 s for 0.8 s: never 0.4 s idle
            assert await pool.run(_count) == 1
            await asyncio.sleep(0.1)
        assert pool.releases == 0 and pool._idle
        pool.close()

    asyncio.run(scenario())
