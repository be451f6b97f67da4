"""A TCP proxy for APNsClientTests: `python3 freezing_proxy.py TARGET_PORT PORT_FILE`.

Listens on 127.0.0.1 (its port is written to PORT_FILE), forwards every connection to 127.0.0.1:TARGET_PORT.
On SIGUSR1 it freezes the connections open at that moment: they stay open but no byte moves in
either direction any more (a dead peer that never answers, unlike a closed socket). Connections
accepted later are forwarded normally."""
import asyncio
import signal
import sys

# A parent that blocks signals in its threads passes the mask on through exec: unblock them.
signal.pthread_sigmask(signal.SIG_SETMASK, set())
TARGET = int(sys.argv[1])
live = set()
frozen = set()


async def pump(reader, writer, key):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            while key in frozen:
                await asyncio.sleep(3600)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        if key not in frozen:
            writer.close()


async def handle(client_reader, client_writer):
    key = object()
    live.add(key)
    upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", TARGET)
    await asyncio.gather(pump(client_reader, upstream_writer, key), pump(upstream_reader, client_writer, key))
    live.discard(key)


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, lambda: frozen.update(live))
    with open(sys.argv[2] + ".tmp", "w") as out:
        out.write(str(server.sockets[0].getsockname()[1]))
    import os
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    async with server:
        await server.serve_forever()


asyncio.run(main())
