"""The broker's produce memory bound (broker/limits.py): requests past queued.max.request.bytes
wait in strict arrival order and run as memory is released."""
from __future__ import annotations

import asyncio

from raftka.broker.limits import ByteBudget


def test_requests_past_the_budget_wait_and_run_in_arrival_order():
    async def scenario():
        budget = ByteBudget(100)
        order = []
        assert budget.try_acquire(80)

        async def request(name, size):
            await budget.acquire(size)
            order.append(name)
        tasks = [asyncio.create_task(request("a", 50)), asyncio.create_task(request("b", 10))]
        await asyncio.sleep(0)
        assert order == [] and budget.waiting == 2  # b fits, but may not overtake a
        assert not budget.try_acquire(1)  # nor may a newcomer
        budget.release(80)
        await asyncio.gather(*tasks)
        assert order == ["a", "b"] and budget.used == 60
    asyncio.run(scenario())


def test_a_request_larger_than_the_whole_budget_runs_alone_once_others_drained():
    async def scenario():
        budget = ByteBudget(100)
        assert budget.try_acquire(30)
        big = asyncio.create_task(budget.acquire(500))
        await asyncio.sleep(0)
        assert not big.done()
        budget.release(30)
        await asyncio.wait_for(big, 1)
        assert budget.used == 500
        budget.release(500)
        assert budget.used == 0
    asyncio.run(scenario())


def test_a_cancelled_waiter_gives_its_place_to_the_next():
    async def scenario():
        budget = ByteBudget(10)
        assert budget.try_acquire(10)
        first = asyncio.create_task(budget.acquire(10))
        second = asyncio.create_task(budget.acquire(5))
        await asyncio.sleep(0)
        first.cancel()
        await asyncio.sleep(0)
        budget.release(10)
        await asyncio.wait_for(second, 1)
        assert budget.used == 5 and budget.waiting == 0
    asyncio.run(scenario())
