"""The TCP sockets a process tree listens on, read from /proc (what `ss -ltnp` shows, without needing iproute2 or
psutil): each as (pid, process name, address, port)."""
from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from typing import NamedTuple


class Listening(NamedTuple):
    pid: int
    name: str
    address: str
    port: int

    @property
    def loopback(self) -> bool:
        ip = ipaddress.ip_address(self.address)
        mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1, a dual-stack socket bound to loopback
        return (mapped or ip).is_loopback


def _address(field: str) -> tuple[str, int]:
    """/proc/net/tcp{,6}'s `HEXIP:HEXPORT`: the IP is stored as 32-bit words in host byte order."""
    ip, port = field.split(":")
    raw = bytes.fromhex(ip)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, words), int(port, 16)


def listening_inodes(proc: Path = Path("/proc")) -> dict[int, tuple[str, int]]:
    """Socket inode -> (address, port) of every TCP socket in LISTEN state (0A) of this network namespace."""
    out = {}
    for table in ("tcp", "tcp6"):
        path = proc / "net" / table
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":
                out[int(fields[9])] = _address(fields[1])
    return out


def process_tree(root: int, proc: Path = Path("/proc")) -> list[int]:
    """`root` and every process below it (by parent pid), those alive now."""
    children: dict[int, list[int]] = {}
    for d in proc.iterdir():
        if d.name.isdigit():
            try:
                parent = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(d.name))
    todo, seen = [root], []
    while todo:
        pid = todo.pop()
        seen.append(pid)
        todo += children.get(pid, [])
    return seen


def listening_sockets(root: int) -> list[Listening]:
    """What the process tree of `root` listens on (a socket shared by several processes once per process)."""
    inodes = listening_inodes()
    found = set()
    for pid in process_tree(root):
        try:
            name = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            label = " ".join(a.decode(errors="replace") for a in name[:2] if a)[:120]
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue  # gone meanwhile
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and int(target[8:-1]) in inodes:
                found.add(Listening(pid, label, *inodes[int(target[8:-1])]))
    return sorted(found)
