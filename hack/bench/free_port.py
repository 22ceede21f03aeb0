#!/usr/bin/env python3
"""Prints a free TCP port on 127.0.0.1 (for a server hack/bench.sh starts)."""
import socket

s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
