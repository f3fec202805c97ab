from ctxscope.proxy.ids import new_call_id


def test_ids_are_unique_sorted_and_fixed_width_even_within_one_clock_tick():
    ids = [new_call_id() for _ in range(20000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert {len(i) for i in ids} == {22} and all(int(i, 16) >= 0 for i in ids)
