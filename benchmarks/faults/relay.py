"""A TCP relay: listens on ``--listen`` at each port given and forwards every connection to ``--target``
at the same port. With ``--broker mock`` (benchmarks.faults.deployment) one runs on every host, forwarding
its loopback's mock ports over the bridge to the controller's, where a second one forwards them to the
mock cluster's loopback listeners (librdkafka binds and advertises 127.0.0.1 only)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
from pathlib import Path

from infra.process import parent_death_preexec

CHUNK = 1 << 16


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except (ConnectionError, OSError):
            pass


async def relay(listen: str, target: str, ports: list[int]) -> None:
    async def serve(port: int):
        async def connected(reader, writer):
            try:
                up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(target, port), 5)
            except (OSError, asyncio.TimeoutError):
                writer.close()
                return
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

        return await asyncio.start_server(connected, listen, port, reuse_address=True)

    servers = [await serve(p) for p in ports]
    print(f"relaying {listen} -> {target} on ports {ports}", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


def spawn_relay_here(listen: str, ports: list[int], log_path: Path, target: str = "127.0.0.1"):
    """A relay in this process's namespace (a ``hosts.Process``-like object: ``stop``, ``alive``)."""
    from .hosts import Process

    class Local(Process):
        def start(self):
            self.starts += 1
            with open(self.log_path, "ab") as log:
                self.popen = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True,
                                              preexec_fn=parent_death_preexec(signal.SIGKILL))
            return self

    argv = [sys.executable, "-m", "benchmarks.faults.relay", "--listen", listen, "--target", target,
            *[str(p) for p in ports]]
    return Local(None, argv, log_path).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("ports", nargs="+", type=int)
    args = parser.parse_args(argv)
    asyncio.run(relay(args.listen, args.target, args.ports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
