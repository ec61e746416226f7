"""The plugin's two thread pools, and the gauges Aiven's thread-pool beans report of them.

``transform``: a copy's chunk transforms and a stream's chunk loads (``transform.thread.pool.size``).
``background``: what no broker thread waits for: prefetch, and decoding the chunks a coalesced GET brought
ahead of their reader (``fetch.chunk.cache.thread.pool.size``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor


class ThreadPools:
    def __init__(self, transform_threads: int, background_threads: int) -> None:
        self.transform = ThreadPoolExecutor(max_workers=transform_threads, thread_name_prefix="rsm-transform")
        self.background = ThreadPoolExecutor(max_workers=background_threads, thread_name_prefix="rsm-prefetch")

    def stats(self) -> dict[str, dict[str, float]]:
        """Each pool's gauges by pool name, with Aiven's names. ``ThreadPoolExecutor`` has no public gauges, so
        they are read from its fields here, and nowhere else."""
        out: dict[str, dict[str, float]] = {}
        for name, pool in (("transform", self.transform), ("prefetch", self.background)):
            threads = len(pool._threads)  # noqa: SLF001
            out[name] = {
                # The idle semaphore is released once per finished task, so it can exceed the thread count.
                "active-thread-count-total": max(0, threads - pool._idle_semaphore._value),  # noqa: SLF001
                "pool-size-total": threads,
                "parallelism-total": pool._max_workers,  # noqa: SLF001
                "queued-task-count-total": pool._work_queue.qsize(),  # noqa: SLF001
            }
        return out

    def close(self) -> None:
        """Stop both, dropping the tasks not started and waiting for the running ones."""
        self.transform.shutdown(wait=True, cancel_futures=True)
        self.background.shutdown(wait=True, cancel_futures=True)
