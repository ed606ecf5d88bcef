"""A worker's keep-alive connections to the server: idle ones to reuse, active ones carrying a request."""

from __future__ import annotations

import asyncio
import ssl

from servelab.bench.accounting import Accounting
from servelab.bench.client import StreamConn
from servelab.bench.payload import Target

CONNECT_BATCH = 32  # connections opened together, so a server's accept backlog never drops a SYN


class ConnectionPool:
    """Connections of one worker. `owner` (the Worker) is told when a request on a connection ends, when a
    stale connection needs the request retried, and when a connection is lost."""

    def __init__(
        self, target: Target, tls: ssl.SSLContext | None, owner, loop, stats: Accounting, max_body_bytes: int
    ) -> None:
        self.host, self.port, self.tls = target.host, target.port, tls
        self.max_body_bytes = max_body_bytes
        self.owner = owner
        self.loop = loop
        self.stats = stats
        self.idle: list[StreamConn] = []
        self.active: set[StreamConn] = set()

    async def preconnect(self, n: int) -> None:
        """Open up to n idle connections before the run, so no connect falls inside a TTFT."""
        for start in range(0, n, CONNECT_BATCH):
            results = await asyncio.gather(
                *(self.connect() for _ in range(min(CONNECT_BATCH, n - start))), return_exceptions=True
            )
            self.idle.extend(r for r in results if isinstance(r, StreamConn))

    async def connect(self) -> StreamConn:
        _, conn = await self.loop.create_connection(
            lambda: StreamConn(self.owner, self.max_body_bytes), self.host, self.port, ssl=self.tls
        )
        self.stats.connections_opened += 1
        return conn

    def take_idle(self) -> StreamConn | None:
        """An open idle connection, or None."""
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed:
                return conn
        return None

    def activate(self, conn: StreamConn) -> None:
        self.active.add(conn)

    def release(self, conn: StreamConn, reusable: bool) -> None:
        """A request on `conn` ended; keep the connection for the next one when it can carry one."""
        self.active.discard(conn)
        if reusable:
            self.idle.append(conn)

    def lost(self, conn: StreamConn) -> None:
        self.active.discard(conn)

    def expire(self, now: float, timeout_s: float) -> None:
        """Time out every request sent more than timeout_s ago."""
        for conn in list(self.active):
            st = conn.st
            if st is not None and now - st.sent > timeout_s:
                conn.timeout(now, timeout_s)

    def finish_all(self, now: float, reason: str) -> None:
        """End every request in flight with `reason` (the run stops)."""
        for conn in list(self.active):
            if conn.st is not None:
                conn.finish(now, reason)

    def close(self) -> None:
        """Close every connection: the bench is over (the process runs the next one with connections of its
        own, as a new process would)."""
        for conn in self.idle + list(self.active):
            conn.close()
        self.idle, self.active = [], set()
