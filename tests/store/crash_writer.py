"""Subprocess for the crash test: N concurrent writers, each printing ACK <id> once committed."""

from __future__ import annotations

import sys

import trio

from oxiedge.store import Store


async def main(path: str, writers: int) -> None:
    store = Store.open(path)
    async with store.running():
        print("READY", flush=True)

        async def writer(w: int) -> None:
            n = 0
            while True:
                doc = store.stage_insert("acked", {"writer": w, "n": n, "pad": "x" * 100})
                await store.commit()
                sys.stdout.write(f"ACK {doc['_id']} {w} {n}\n")
                sys.stdout.flush()
                n += 1

        async with trio.open_nursery() as nursery:
            for w in range(writers):
                nursery.start_soon(writer, w)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]))
