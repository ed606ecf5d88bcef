"""The device host's CPU, written beside each run's results (heldout.sh): its model and one core's speed.

vLLM's API server and its eager steps are CPU work, and the hosts the device lends differ by about 2x in it
(docs/accuracy.md, "The recipes' stream interval, and vLLM's output slices"). Each figure below is the best of
five of a fixed piece of the work an API server does per token, in microseconds, so two runs' hosts can be
compared: building and serialising an SSE chunk (a dict to JSON), and one asyncio queue round trip.
Standard library and servelab.hostinfo only: it runs before vLLM's and servelab's dependencies are unpacked,
and on any machine.

    PYTHONPATH=src python3 scripts/device_vllm/host_speed.py > host.txt
"""

import asyncio
import json
import os
import platform
import time

from servelab.hostinfo import cpu_model

ROUNDS = 5


def best_us(work, count: int) -> float:
    """The fastest of ROUNDS passes of `work(count)`, per item, in microseconds."""
    best = float("inf")
    for _ in range(ROUNDS):
        began = time.perf_counter()
        work(count)
        best = min(best, time.perf_counter() - began)
    return best / count * 1e6


def sse_chunks(count: int) -> None:
    for i in range(count):
        chunk = {
            "id": "cmpl-0123456789abcdef",
            "object": "text_completion",
            "created": 1796684816,
            "model": "model",
            "choices": [{"index": 0, "text": f" token{i}", "logprobs": None, "finish_reason": None}],
        }
        _ = f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode()


def queue_round_trips(count: int) -> None:
    async def pass_items() -> None:
        queue: asyncio.Queue[int] = asyncio.Queue()

        async def consume() -> None:
            for _ in range(count):
                await queue.get()

        consumer = asyncio.create_task(consume())
        for i in range(count):
            queue.put_nowait(i)
            await asyncio.sleep(0)
        await consumer

    asyncio.run(pass_items())


def main() -> None:
    print(f"cpu: {cpu_model()}")
    print(f"cores: {os.cpu_count()}")
    print(f"python: {platform.python_version()}")
    print(f"sse_chunk_us: {best_us(sse_chunks, 20000):.3f}")
    print(f"queue_round_trip_us: {best_us(queue_round_trips, 20000):.3f}")


if __name__ == "__main__":
    main()
