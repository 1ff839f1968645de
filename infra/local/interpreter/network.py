"""Egress for PUBLIC sessions without any path to this host's own services.

Every session, PUBLIC or SANDBOX, has its own network namespace (bubblewrap `--unshare-net`):
127.0.0.1 inside is the session's own loopback, never the host's. A SANDBOX session keeps only
that loopback. A PUBLIC session also gets user-mode networking from slirp4netns (a `tap0` device,
10.0.2.100/24, default route via 10.0.2.2), started by the server once the namespace exists:

- `--disable-host-loopback`: 10.0.2.2 (slirp's alias for the host's loopback) is refused, so the
  interpreter API, the emulated AWS, the Lambda emulator and any other 127.0.0.1 port are out of
  reach;
- slirp opens outbound connections as ordinary sockets of the host, so a connection to one of the
  host's *own* addresses (e.g. eth0's) would reach services listening on 0.0.0.0 there: each of
  the host's IPv4 addresses, and link-local 169.254.0.0/16 (cloud instance metadata, i.e. the
  host's cloud credentials), gets a `prohibit` route inside the session's namespace (added by
  root with `nsenter … ip`, before any user code runs; the session has no capability in that
  namespace to remove them). slirp4netns is started without IPv6, so the session has no IPv6
  route at all.

What stays reachable: other machines (that is the egress PUBLIC promises), and DNS through
slirp's forwarder 10.0.2.3 (the session's resolv.conf points there).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import select
import shutil
import subprocess
from dataclasses import dataclass

TAP = "tap0"
SLIRP_DNS = "10.0.2.3"
RESOLV_CONF = f"nameserver {SLIRP_DNS}\n"
TOOLS = ("slirp4netns", "nsenter", "ip")


class NetworkSetupFailed(RuntimeError):
    pass


def missing_tools() -> list[str]:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if not os.path.exists("/dev/net/tun"):
        missing.append("/dev/net/tun")
    return missing


def host_ipv4_addresses() -> list[str]:
    """Every IPv4 address configured on this host, loopback excluded (it is per namespace)."""
    out = subprocess.run(
        ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            address = ipaddress.ip_interface(fields[fields.index("inet") + 1]).ip
            if not address.is_loopback:
                found.append(str(address))
    return sorted(set(found))


@dataclass
class Slirp:
    proc: subprocess.Popen[bytes]
    exit_fd: int  # closing it makes slirp4netns exit

    def stop(self) -> None:
        if self.exit_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.exit_fd)
            self.exit_fd = -1
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


# Link-local (169.254.0.0/16) holds cloud instance-metadata endpoints (169.254.169.254: the host's
# own cloud credentials); never a destination a session needs.
FENCED_NETWORKS = ("169.254.0.0/16",)


def block_host_addresses(pid: int, addresses: list[str]) -> None:
    """`prohibit` routes for `addresses` (and FENCED_NETWORKS) inside the network namespace of `pid`."""
    batch = "".join(f"route add prohibit {a}/32\n" for a in addresses)
    batch += "".join(f"route add prohibit {net}\n" for net in FENCED_NETWORKS)
    done = subprocess.run(
        ["nsenter", f"--net=/proc/{pid}/ns/net", "--", "ip", "-batch", "-"],
        input=batch,
        capture_output=True,
        text=True,
        timeout=10,
    )
    if done.returncode != 0:
        raise NetworkSetupFailed(f"could not fence the host's addresses off: {done.stderr.strip()[:200]}")


def attach_public(pid: int, log_path: str, timeout: float = 10.0) -> Slirp:
    """Fence the host off, then give the namespace of `pid` slirp4netns egress; returns once the
    namespace is configured (tap0 up, default route), so no user code runs before."""
    block_host_addresses(pid, host_ipv4_addresses())
    ready_r, ready_w = os.pipe()
    exit_r, exit_w = os.pipe()
    try:
        with open(log_path, "ab") as log_file:
            proc = subprocess.Popen(
                # --enable-sandbox/--enable-seccomp: slirp4netns itself (root, parsing the
                # session's packets) runs in its own mount namespace with a syscall filter.
                [
                    "slirp4netns",
                    "--configure",
                    "--mtu=65520",
                    "--disable-host-loopback",
                    "--enable-sandbox",
                    "--enable-seccomp",
                    "--ready-fd",
                    str(ready_w),
                    "--exit-fd",
                    str(exit_r),
                    str(pid),
                    TAP,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                pass_fds=(ready_w, exit_r),
                start_new_session=True,
            )
    except OSError as exc:
        for fd in (ready_r, ready_w, exit_r, exit_w):
            os.close(fd)
        raise NetworkSetupFailed(f"could not start slirp4netns: {exc}") from exc
    os.close(ready_w)
    os.close(exit_r)
    slirp = Slirp(proc, exit_w)
    try:
        readable, _, _ = select.select([ready_r], [], [], timeout)
        if not readable or os.read(ready_r, 1) != b"1":
            raise NetworkSetupFailed("slirp4netns did not configure the session's network")
    except BaseException:
        slirp.stop()
        raise
    finally:
        os.close(ready_r)
    return slirp
