"""Who listens on a TCP port, from Linux's /proc: a server started on a port that another program took
in the meantime fails to bind, and a health check would take the other program's answers for its own.

Pure reading, no side effects; None wherever /proc cannot tell (another platform).
"""

from __future__ import annotations

import os
from pathlib import Path

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's state column


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[int] | None:
    """The inodes of the sockets listening on `port` (any address, IPv4 or IPv6) in this network
    namespace; None where /proc/net has no TCP tables."""
    inodes: set[int] = set()
    found = False
    for table in ("net/tcp", "net/tcp6"):
        try:
            rows = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        found = True
        for row in rows:
            fields = row.split()
            local, state, inode = fields[1], fields[3], int(fields[9])
            if state == _LISTEN and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    return inodes if found else None


def session_listens(session: int, port: int, proc: Path = Path("/proc")) -> bool | None:
    """Whether a process of `session` (a server started in a session of its own: its pid) holds a
    socket listening on `port`; None where /proc cannot tell."""
    inodes = listening_inodes(port, proc)
    if inodes is None:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # The session id is the 6th field of stat, counted after the command's closing parenthesis.
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[3]) != session:
                continue
            if any(os.readlink(fd) in wanted for fd in (entry / "fd").iterdir()):
                return True
        except (OSError, ValueError, IndexError):  # gone meanwhile, or not ours to read
            continue
    return False
