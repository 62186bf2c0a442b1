"""Static memory planning: no two live buffers overlap, dead ones are reused."""
from core.graph.memory import Lifetime, plan_memory


def overlaps(a, b, plan):
    oa, ob = plan.offsets[a.name], plan.offsets[b.name]
    live_together = a.start <= b.end and b.start <= a.end
    return live_together and oa < ob + b.size and ob < oa + a.size


def test_chain_reuses_dead_buffers():
    # a -> b -> c -> d: each value dies after the next step, so two slots suffice.
    lts = [Lifetime(n, 1000, i, i + 1) for i, n in enumerate("abcd")]
    plan = plan_memory(lts)
    assert plan.naive_bytes == 4 * 1024
    assert plan.arena_bytes == 2 * 1024
    assert not any(overlaps(x, y, plan) for x in lts for y in lts if x is not y)


def test_long_lived_buffer_is_never_shared():
    lts = [Lifetime("skip", 4096, 0, 5)] + [Lifetime(f"t{i}", 2048, i, i + 1) for i in range(5)]
    plan = plan_memory(lts)
    assert not any(overlaps(x, y, plan) for x in lts for y in lts if x is not y)
    assert plan.arena_bytes == 4096 + 2 * 2048


def test_offsets_are_aligned():
    plan = plan_memory([Lifetime("x", 3, 0, 0), Lifetime("y", 5, 0, 0)])
    assert all(off % 64 == 0 for off in plan.offsets.values())
