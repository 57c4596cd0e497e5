"""A 3-member etcd cluster on loopback ports the kernel gave out, for the
benchmarks that run against etcd (bench/etcd_cost.py,
bench/takeover_bench.py): Debian's etcd-server, one data directory each
under a directory the caller gives, a static initial cluster. The caller
stops the members (stop), in every path.

Python 3 standard library only.
"""
import os
import signal
import socket
import subprocess
import time
import urllib.request


class ClusterError(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(d, procs):
    """Starts 3 members into procs; returns the etcd:// URL once the
    cluster takes a write. Raises ClusterError when it does not within
    20 s (the members started stay in procs, for the caller to stop)."""
    ports = [(free_port(), free_port()) for _ in range(3)]
    initial = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, (_, p) in enumerate(ports))
    for i, (c, p) in enumerate(ports):
        procs.append(subprocess.Popen(
            ["etcd", "--name", f"m{i}", "--data-dir", os.path.join(d, f"m{i}"),
             "--listen-client-urls", f"http://127.0.0.1:{c}", "--advertise-client-urls", f"http://127.0.0.1:{c}",
             "--listen-peer-urls", f"http://127.0.0.1:{p}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{p}",
             "--initial-cluster", initial, "--initial-cluster-state", "new", "--initial-cluster-token", "bench",
             "--logger", "zap", "--log-outputs", os.path.join(d, f"m{i}.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    url = "etcd://" + ",".join(f"127.0.0.1:{c}" for c, _ in ports)
    for _ in range(100):
        try:
            urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{ports[0][0]}/v3/kv/put",
                                                          data=b'{"key":"eA==","value":"eA=="}'), timeout=1)
            return url
        except OSError:
            time.sleep(0.2)
    raise ClusterError("the etcd cluster did not start (its logs: m0.log .. m2.log)")


def stop(procs):
    """SIGKILLs and reaps every member in procs."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait()
