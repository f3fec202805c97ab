"""The proxy's ledger of what its writer child has taken and counted (writer/daemon_side/in_flight.py)."""

from __future__ import annotations

from ctxscope.inspector.writer.daemon_side.in_flight import InFlight


def test_a_call_is_unacknowledged_then_taken_then_counted():
    ledger = InFlight()
    for n in range(3):
        ledger.add(10 + n, f"c{n}")
    assert (len(ledger.unacked), ledger.unacked_bytes, ledger.queued, ledger.queued_bytes) == (3, 33, 3, 33)
    ledger.acknowledged(2)  # the child read two off the pipe: no longer against the queue limits
    assert [call_id for _, call_id in ledger.unacked] == ["c2"] and ledger.unacked_bytes == 12
    assert (ledger.queued, ledger.queued_bytes) == (3, 33)  # still queued until its counters say so
    ledger.counted(2)
    assert (ledger.queued, ledger.queued_bytes) == (1, 12)
    ledger.counted(3)  # counters may come before the Taken that would have said it
    assert (ledger.queued, ledger.queued_bytes, ledger.unacked_bytes) == (0, 0, 0)


def test_a_dead_child_had_every_unacknowledged_call_but_those_still_held():
    ledger = InFlight()
    for n in range(5):
        ledger.add(1, f"c{n}")
    ledger.acknowledged(1)  # c0 taken by the child that dies
    sent = ledger.sent_to_child(held=2)  # c3 and c4 never left the proxy
    assert [call_id for _, call_id in sent] == ["c1", "c2"]
    assert [call_id for _, call_id in ledger.unacked] == ["c3", "c4"]
    assert (ledger.queued, ledger.taken_bytes) == (2, 0)  # the dead child's spool is the next one's to count
    ledger.acknowledged(1)  # the new child counts from zero
    assert [call_id for _, call_id in ledger.unacked] == ["c4"]
    ledger.forget_newest(1)
    assert not ledger.unacked and ledger.unacked_bytes == 0
