"""Sends each remaining argument as one command line to the dev broker's control port HOST:PORT and
prints each answer line."""
import socket
import sys

host, port = sys.argv[1].rsplit(":", 1)
with socket.create_connection((host, int(port)), timeout=10) as conn:
    reader = conn.makefile("r")
    for command in sys.argv[2:]:
        conn.sendall((command + "\n").encode())
        print(reader.readline().rstrip("\n"), flush=True)
