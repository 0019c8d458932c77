"""Fake hosts with real links: network namespaces on a private bridge (Linux, root).

Host i is the namespace `<prefix>h<i>` with the address `<net>.<i>/24` on its `veth0`; the
bridge `br0` lives in the namespace `<prefix>sw`, where host i's cable is the port `p<i>`. A
"controller" host (index 254 by default, namespace `<prefix>ctl`) is there for daemons and clients
that must reach every host (slurmctld, the coordinator, test clients).

Safety (../shared/recipes/services.md gotcha 1): the root namespace's default route leads off
the machine, so before any namespace exists `<net>.0/24` is made unreachable there: a stray
connect() from the root namespace fails locally instead of leaving. Every program that talks to
the hosts runs inside one of them (`exec`/`popen`). Nothing here touches an interface of the
root namespace; `down` deletes every namespace it made (their veths go with them) and the route.

Links can be cut (`cut`: the switch port goes down, connections stall without a reset, as a
pulled cable), slowed (`rate`: tbf on the host's veth) or made lossy (`loss`: nftables drops a
share of the host's outgoing packets). The kernel here has no netem (the recipe's §4.1).

Daemons that mount or read /sys (slurmd) must enter only the network namespace: `nsenter
--net=/run/netns/NAME`, which `exec` and `popen` use, never `ip netns exec` (it remounts /sys).

As a command: python3 tests/lib/fakehosts.py up|down|cut|heal|rate|norate|loss|noloss ...
(`--prefix`, `--net`, `--hosts`), for scripts/slurm-local and for trying things by hand.
"""
import argparse
import ipaddress
import os
import shutil
import subprocess
import sys

CONTROLLER = 254


def _run(*args, check=True):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30, check=check)


class FakeHosts:
    def __init__(self, prefix, net, hosts, controller=True):
        """`prefix`: a short namespace-name prefix no one else uses (<= 8 characters); `net`: the
        first three octets of a private /24 ("10.77.3"); `hosts`: how many hosts (1..250)."""
        if not (1 <= hosts <= 250):
            raise ValueError(f"hosts must be 1..250, not {hosts}")
        if len(prefix) > 8 or not prefix.isalnum():
            raise ValueError(f"prefix must be 1..8 letters or digits, not {prefix!r}")
        network = ipaddress.ip_network(f"{net}.0/24")
        if not network.is_private:
            raise ValueError(f"{net}.0/24 is not a private network")
        self.prefix = prefix
        self.net = net
        self.hosts = hosts
        self.controller = controller
        self.switch = f"{prefix}sw"

    # --- names and addresses ---
    def ns(self, i):
        """The namespace of host i (1-based), or of the controller for i == CONTROLLER."""
        return f"{self.prefix}ctl" if i == CONTROLLER else f"{self.prefix}h{i}"

    def addr(self, i):
        return f"{self.net}.{i}"

    def indexes(self):
        return list(range(1, self.hosts + 1)) + ([CONTROLLER] if self.controller else [])

    # --- lifecycle ---
    def up(self):
        if os.geteuid() != 0:
            raise PermissionError("fake hosts need root (network namespaces)")
        if shutil.which("ip") is None:
            raise FileNotFoundError("iproute2's ip is not installed (scripts/install-deps)")
        self.down()  # leftovers of an earlier run with the same prefix
        # First of all: from the root namespace, the private subnet fails locally.
        _run("ip", "route", "replace", "unreachable", f"{self.net}.0/24")
        _run("ip", "netns", "add", self.switch)
        _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.switch, "link", "set", "br0", "up")
        for i in self.indexes():
            ns = self.ns(i)
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", "veth0", "netns", ns, "type", "veth", "peer", "name",
                 f"p{i}", "netns", self.switch)
            _run("ip", "-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "veth0")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", ns, "link", "set", "veth0", "up")
            _run("ip", "-n", self.switch, "link", "set", f"p{i}", "master", "br0")
            _run("ip", "-n", self.switch, "link", "set", f"p{i}", "up")
        return self

    def pids(self, i):
        r = _run("ip", "netns", "pids", self.ns(i), check=False)
        return [int(p) for p in r.stdout.split()] if r.returncode == 0 else []

    def down(self):
        """Kills what still runs in the hosts, deletes the namespaces and the route. Idempotent."""
        existing = set(_run("ip", "netns", "list", check=False).stdout.split())
        for i in list(range(1, 251)) + [CONTROLLER]:
            ns = self.ns(i)
            if ns not in existing:
                continue
            for pid in self.pids(i):
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            _run("ip", "netns", "del", ns, check=False)
        if self.switch in existing:
            _run("ip", "netns", "del", self.switch, check=False)
        _run("ip", "route", "del", "unreachable", f"{self.net}.0/24", check=False)

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()

    # --- running things inside a host ---
    def command(self, i, argv):
        """argv wrapped to run in host i's network namespace (and nothing else's)."""
        return ["nsenter", f"--net=/run/netns/{self.ns(i)}", "--", *argv]

    def exec(self, i, argv, timeout=60, env=None, check=False):
        return subprocess.run(self.command(i, argv), capture_output=True, text=True,
                              timeout=timeout, env=env, check=check)

    def popen(self, i, argv, **kwargs):
        return subprocess.Popen(self.command(i, argv), **kwargs)

    # --- link faults ---
    def cut(self, i):
        """Host i's cable is pulled: its established connections stall, new ones time out."""
        _run("ip", "-n", self.switch, "link", "set", f"p{i}", "down")

    def heal(self, i):
        _run("ip", "-n", self.switch, "link", "set", f"p{i}", "up")

    def rate(self, i, rate):
        """Host i sends at most `rate` ("10mbit") through its veth (tbf)."""
        _run("ip", "netns", "exec", self.ns(i), "tc", "qdisc", "replace", "dev", "veth0", "root",
             "tbf", "rate", rate, "burst", "32kbit", "latency", "50ms")

    def norate(self, i):
        _run("ip", "netns", "exec", self.ns(i), "tc", "qdisc", "del", "dev", "veth0", "root",
             check=False)
        _run("ip", "netns", "exec", self.ns(i), "nft", "delete", "table", "inet", "kilnrate",
             check=False)

    def rate_to(self, i, j, rate):
        """Only what host i sends to host j goes through tbf at `rate`: one slow link between two
        hosts, every other link of both as fast as before. The kernel here has no prio qdisc and
        no tc classifiers, so nftables marks the packets for j (skb priority 1:20) and an htb
        root sends that class through the tbf."""
        ns = self.ns(i)
        tc = ["ip", "netns", "exec", ns, "tc"]
        _run(*tc, "qdisc", "replace", "dev", "veth0", "root", "handle", "1:", "htb", "default", "10")
        for cls in ("1:10", "1:20"):
            _run(*tc, "class", "add", "dev", "veth0", "parent", "1:", "classid", cls, "htb",
                 "rate", "10gbit")
        _run(*tc, "qdisc", "add", "dev", "veth0", "parent", "1:20", "handle", "20:", "tbf", "rate",
             rate, "burst", "32kbit", "latency", "50ms")
        nft = ["ip", "netns", "exec", ns, "nft"]
        _run(*nft, "add", "table", "inet", "kilnrate")
        _run(*nft, "add chain inet kilnrate out { type filter hook output priority 0; policy accept; }")
        _run(*nft, "add", "rule", "inet", "kilnrate", "out", "ip", "daddr", self.addr(j), "meta",
             "priority", "set", "1:20")

    def loss(self, i, percent):
        """Host i drops `percent` % of the packets it sends to the other hosts (nftables)."""
        ns = self.ns(i)
        _run("ip", "netns", "exec", ns, "nft", "add", "table", "inet", "kilnchaos")
        _run("ip", "netns", "exec", ns, "nft",
             "add chain inet kilnchaos out { type filter hook output priority 0; policy accept; }")
        _run("ip", "netns", "exec", ns, "nft", "add", "rule", "inet", "kilnchaos", "out", "ip",
             "daddr", f"{self.net}.0/24", "numgen", "random", "mod", "100", "<", str(int(percent)),
             "drop")

    def noloss(self, i):
        _run("ip", "netns", "exec", self.ns(i), "nft", "delete", "table", "inet", "kilnchaos",
             check=False)

    def tcp_connections(self, i):
        """Established TCP connections in host i: [(local "ip:port", peer "ip:port")]."""
        r = self.exec(i, ["ss", "-Htn", "state", "established"], timeout=10)
        out = []
        for line in r.stdout.splitlines():
            fields = line.split()
            if len(fields) >= 4:
                out.append((fields[-2], fields[-1]))
        return out


def main(argv):
    p = argparse.ArgumentParser(description="fake hosts in network namespaces")
    p.add_argument("action", choices=["up", "down", "cut", "heal", "rate", "norate", "loss",
                                      "noloss"])
    p.add_argument("args", nargs="*")
    p.add_argument("--prefix", default="kiln")
    p.add_argument("--net", default="10.77.0")
    p.add_argument("--hosts", type=int, default=4)
    a = p.parse_args(argv)
    hosts = FakeHosts(a.prefix, a.net, a.hosts)
    if a.action in ("up", "down"):
        getattr(hosts, a.action)()
        return 0
    if not a.args:
        p.error(f"{a.action} needs a host index")
    i = int(a.args[0])
    getattr(hosts, a.action)(i, *a.args[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
