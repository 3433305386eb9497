"""A TCP forwarder on 127.0.0.1 that a test can cut: a real network path for fault injection.

    python tcp_proxy.py HOST:PORT --port-file F [--down-s 3]

Listens on a free loopback port (written to ``F``) and forwards every connection to
``HOST:PORT``. On SIGUSR1 it drops every open connection (both directions shut down, as when a
cable or a Wi-Fi link goes) and refuses new ones for ``--down-s`` seconds. Not a mock: gRPC on
both sides sees a real TCP connection break.
"""

from __future__ import annotations

import argparse
import signal
import socket
import threading
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("target")
    p.add_argument("--port-file", required=True)
    p.add_argument("--down-s", type=float, default=3.0)
    args = p.parse_args()
    host, port = args.target.rsplit(":", 1)
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    lock = threading.Lock()
    conns: set[socket.socket] = set()
    down_until = [0.0]

    def drop(signum: int, frame: object) -> None:
        down_until[0] = time.monotonic() + args.down_s
        with lock:
            for s in conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            conns.clear()

    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    signal.signal(signal.SIGUSR1, drop)
    tmp = Path(args.port_file + ".tmp")
    tmp.write_text(str(lsock.getsockname()[1]))
    tmp.replace(args.port_file)
    while True:
        client, _ = lsock.accept()
        if time.monotonic() < down_until[0]:
            client.close()
            continue
        try:
            upstream = socket.create_connection((host, int(port)), timeout=2.0)
        except OSError:
            client.close()
            continue
        upstream.settimeout(None)
        with lock:
            conns.update((client, upstream))
        threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()


if __name__ == "__main__":
    main()
