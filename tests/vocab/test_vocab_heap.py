"""The C heap of the daemon and the writer child (docs/architecture.md, "Memory"): threads share
the arenas it allows, and a large buffer freed and taken again is not mapped and faulted in anew."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ctxscope.vocab.heap import resident_bytes

from support.environment import require

_ARENAS = r"""
import ctypes, sys, threading
from ctxscope.vocab.heap import tune_heap

if sys.argv[1] != "default":
    tune_heap(int(sys.argv[1]))
together = threading.Barrier(6)
held = []


def work():
    together.wait()  # every thread is alive when it first takes from the heap
    held.append([bytes(50_000 + i) for i in range(20)])


threads = [threading.Thread(target=work) for _ in range(6)]
for t in threads:
    t.start()
for t in threads:
    t.join()
ctypes.CDLL(None).malloc_stats()  # glibc: one "Arena N:" block per arena, on stderr
"""

# Two 1 MB buffers alive at once, then freed, over and over: a body read off a pipe and its copy.
_FAULTS = r"""
import os, resource, sys
from ctxscope.vocab.heap import release_heap, tune_heap

if sys.argv[1] == "tuned":
    tune_heap(1)
body = os.urandom(1 << 20)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(200):
    read = bytearray(body)
    copy = bytes(memoryview(read)[1:])
    del read, copy
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
release_heap()
"""


def _glibc() -> None:
    libc = os.confstr("CS_GNU_LIBC_VERSION") if "CS_GNU_LIBC_VERSION" in os.confstr_names else None
    require((libc or "").startswith("glibc"), "glibc's malloc (elsewhere tune_heap does nothing)")


def _run(script: str, arg: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-c", script, arg], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def test_tune_heap_keeps_every_thread_in_as_many_arenas():
    """What the daemon and the writer child set at start: threads share the arenas it allows."""
    _glibc()

    def arenas(limit: str) -> int:
        return sum(line.startswith("Arena ") for line in _run(_ARENAS, limit).stderr.splitlines())

    assert arenas("default") > 2  # glibc's default: an arena for each thread that meets the others
    assert arenas("1") == 1
    assert arenas("2") == 2


def test_tune_heap_takes_large_buffers_from_the_heap_not_fresh_mappings():
    """With glibc's defaults each of the 400 1 MB buffers is mapped and faulted in page by page
    (~256 page faults each); tuned, the freed buffers' pages are taken again."""
    _glibc()
    default = int(_run(_FAULTS, "default").stdout)
    tuned = int(_run(_FAULTS, "tuned").stdout)
    assert default > 200 * 256  # the cost the setting removes is there to remove
    assert tuned < 2_000, (tuned, default)


def test_resident_bytes_is_what_the_kernel_counts():
    """The writer child compares it with its rest: it must follow what the kernel says (``VmRSS``),
    and see 64 MB written and let go."""

    def vm_rss() -> int:
        return int(Path("/proc/self/status").read_text().split("VmRSS:")[1].split()[0]) * 1024

    require(Path("/proc/self/statm").exists(), "Linux's /proc (elsewhere resident_bytes is None)")
    before = resident_bytes()
    assert before is not None and abs(before - vm_rss()) < 4 << 20
    block = b"x" * (64 << 20)  # written, so resident
    held = resident_bytes()
    assert held is not None and held - before > 60 << 20
    del block
    after = resident_bytes()
    assert after is not None and held - after > 60 << 20  # a block this size is its own mapping, unmapped
