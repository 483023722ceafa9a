"""A local server's processes as Linux's /proc shows them: which processes are in its session (it is
started in a session of its own: the session id is its pid), and whether one of them listens on its
port. A server started on a port another program took in the meantime fails to bind, and a health check
would take the other program's answers for its own; a server's child can outlive it and hold its GPUs.

Pure reading, no side effects; None wherever /proc cannot tell (another platform, a process not ours).
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


def session_members(session: int, proc: Path = Path("/proc")) -> list[int] | None:
    """The pids of the live processes of `session`; None where /proc cannot tell: another platform, or
    session 0, which is how a session whose leader lies outside this pid namespace reads (a container's)."""
    if session <= 0 or not (proc / "self" / "stat").exists():
        return None
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # The session id is the 6th field of stat, counted after the command's closing parenthesis.
            state, _, _, sid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:4]
        except (OSError, ValueError):  # gone meanwhile
            continue
        if int(sid) == session and state != "Z":
            members.append(int(entry.name))
    return members


def session_listens(session: int, port: int, proc: Path = Path("/proc")) -> bool | None:
    """Whether a process of `session` holds a socket listening on `port`; None where /proc cannot tell
    (no tables, or a process of the session whose sockets this user may not read)."""
    inodes = listening_inodes(port, proc)
    members = session_members(session, proc)
    if inodes is None or members is None:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    unreadable = False
    for pid in members:
        try:
            if any(os.readlink(fd) in wanted for fd in (proc / str(pid) / "fd").iterdir()):
                return True
        except PermissionError:
            unreadable = True
        except OSError:  # gone meanwhile
            continue
    return None if unreadable else False
