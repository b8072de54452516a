"""Pipeline p2p exchanges in the closed-form schedule (workload.estimate._run_schedule): Megatron's
batched, waited-for exchanges (the sender waits for the receiver to post; the interleaved steady
state exchanges once per forward/backward pair)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from xsim_trace.workload.estimate import _run_schedule, exchange_points
from xsim_trace.workload.framework import Schedule
from xsim_trace.workload.schedule import interleaved, interleaved_warmup, one_f_one_b


def _fw(schedule, m, vpp, pp=4):
    return SimpleNamespace(pp=pp, microbatches=m, vpp=vpp, schedule=schedule)


def _passes(pp, vpp, fwd=300, bwd=600):
    return {(s, c, f): (fwd if f else bwd) // vpp for s in range(pp) for c in range(vpp) for f in (True, False)}


def _end(fw, p2p_ns, **kw):
    free = _run_schedule(fw, _passes(fw.pp, fw.vpp), lambda a, b: 0 if a == b else p2p_ns, **kw)[0]
    return max(free.values())


def test_interleaved_steady_forwards_share_the_pair_exchange():
    order = interleaved(3, 4, 8, 3)
    warm = interleaved_warmup(3, 4, 8, 3)
    points = exchange_points(order, 8 * 3 - warm, warm)
    assert warm == 8 and all(points[:warm])
    steady = order[warm:warm + 2 * (24 - warm)]
    assert [p for st, p in zip(steady, points[warm:]) if st.forward] == [False] * (24 - warm)
    assert all(p for st, p in zip(steady, points[warm:]) if not st.forward)
    assert exchange_points(one_f_one_b(0, 4, 8)) == [True] * 16
    # every pass runs when m == pp on the first stage is warm-up: no steady pair
    assert interleaved_warmup(0, 4, 4, 3) == 12


@pytest.mark.parametrize("schedule,m,vpp", [(Schedule.ONE_F_ONE_B, 4, 1), (Schedule.ONE_F_ONE_B, 8, 1),
                                            (Schedule.INTERLEAVED, 4, 3), (Schedule.INTERLEAVED, 8, 3),
                                            (Schedule.INTERLEAVED, 16, 2), (Schedule.GPIPE, 8, 1)])
def test_rendezvous_never_speeds_up_and_is_free_without_link_time(schedule, m, vpp):
    fw = _fw(schedule, m, vpp)
    assert _end(fw, 0) == _end(fw, 0, rendezvous=False)
    assert _end(fw, 10) >= _end(fw, 10, rendezvous=False)


def test_interleaved_pair_exchange_waits_for_the_paired_backward_grad():
    # 1F1B overlaps each transfer with the neighbour's work; in the interleaved steady state the
    # forward also waits for its paired backward's grad, so link time shows more
    fw = _fw(Schedule.INTERLEAVED, 8, 3)
    assert _end(fw, 10) > _end(fw, 10, rendezvous=False)
    plain = _fw(Schedule.ONE_F_ONE_B, 8, 1)
    assert _end(plain, 10) == _end(plain, 10, rendezvous=False)


def test_exchange_host_time_lands_on_the_critical_path():
    for fw in (_fw(Schedule.ONE_F_ONE_B, 8, 1), _fw(Schedule.INTERLEAVED, 8, 3)):
        base = _end(fw, 10)
        assert _end(fw, 10, exchange_host_ns=5) > base
        assert _end(fw, 10, exchange_host_ns=5) <= base + 5 * 2 * fw.microbatches * fw.vpp * fw.pp
