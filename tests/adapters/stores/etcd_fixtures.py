"""Real etcd servers for tests: one member or a 3-member cluster on 127.0.0.1.

Each member is an ``etcd`` process of our own on free ports, with its data in a temp dir (in
``/dev/shm`` when there is one, so the fsyncs etcd does on every write stay cheap on a shared
CI disk). ``stop`` ends only the processes this module started, by PID, and removes the dir.
Tests skip (with the reason) when the ``etcd`` binary is absent; ``.ci/run`` installs it.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ETCD = shutil.which("etcd")
SKIP_REASON = "the etcd binary is not installed (.ci/run installs Debian's etcd-server)"


def free_ports(count: int) -> list[int]:
    # Hold every socket until all are chosen so the ports differ; a rare reuse race with other
    # tests remains, and shows as a member that never becomes healthy.
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


OPENSSL = shutil.which("openssl")


def make_tls_files(where: Path) -> dict[str, str]:
    """A throwaway CA and one certificate for 127.0.0.1, good for server and client auth.

    Returns paths: ``ca``, ``cert``, ``key``. Needs the ``openssl`` command.
    """
    assert OPENSSL is not None, "openssl is not installed"
    where.mkdir(parents=True, exist_ok=True)
    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args: str) -> None:
        subprocess.run([OPENSSL, *args], cwd=where, check=True, capture_output=True, timeout=30)

    run("req", "-x509", *new_key, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
        "-subj", "/CN=tpelastic-test-ca")  # fmt: skip
    run("req", *new_key, "-keyout", "node.key", "-out", "node.csr", "-subj", "/CN=127.0.0.1")
    (where / "ext.cnf").write_text(
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n"
    )
    run("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "node.pem", "-days", "1", "-extfile", "ext.cnf")  # fmt: skip
    return {name: str(where / file) for name, file in
            (("ca", "ca.pem"), ("cert", "node.pem"), ("key", "node.key"))}  # fmt: skip


def _die_with_parent() -> None:
    # Linux: the member gets SIGKILL if the test process dies without running ``stop``.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class EtcdCluster:
    """``size`` etcd members on 127.0.0.1; members are numbered 0..size-1.

    With ``tls=True`` clients must speak https with a client certificate signed by a test CA
    (``self.tls`` holds the paths); peers still talk plain http among themselves.
    """

    def __init__(self, size: int = 1, *, tls: bool = False, extra: Sequence[str] = ()) -> None:
        shm = Path("/dev/shm")
        self.dir = Path(tempfile.mkdtemp(prefix="tpe-etcd-", dir=shm if shm.is_dir() else None))
        self.tls = make_tls_files(self.dir / "tls") if tls else None
        self.scheme = "https" if tls else "http"
        self.extra = list(extra)  # more etcd flags for every member
        ports = free_ports(2 * size)
        self.client_ports = ports[:size]
        self.peer_ports = ports[size:]
        self.names = [f"m{i}" for i in range(size)]
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * size
        self.initial = ",".join(
            f"{name}=http://127.0.0.1:{port}"
            for name, port in zip(self.names, self.peer_ports, strict=True)
        )

    @property
    def endpoints(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", port) for port in self.client_ports]

    def _command(self, index: int) -> list[str]:
        client = f"{self.scheme}://127.0.0.1:{self.client_ports[index]}"
        peer = f"http://127.0.0.1:{self.peer_ports[index]}"
        assert ETCD is not None, SKIP_REASON
        tls = []
        if self.tls is not None:
            tls = [
                f"--cert-file={self.tls['cert']}",
                f"--key-file={self.tls['key']}",
                f"--trusted-ca-file={self.tls['ca']}",
                "--client-cert-auth",
            ]
        return [
            ETCD,
            *tls,
            f"--name={self.names[index]}",
            f"--data-dir={self.dir / self.names[index]}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster={self.initial}",
            f"--initial-cluster-token=tpe-{os.getpid()}-{self.client_ports[0]}",
            "--initial-cluster-state=new",
            "--log-level=error",
            # Fast failure detection so a killed leader is replaced in well under a second; 2
            # shared cores still keep a heartbeat of 50 ms.
            "--heartbeat-interval=50",
            "--election-timeout=500",
            *self.extra,
        ]

    def start(self, timeout: float = 20.0) -> None:
        """Start every member and wait until each reports healthy (it has a leader)."""
        for index in range(len(self.names)):
            log = open(self.dir / f"{self.names[index]}.log", "ab")
            self.processes[index] = subprocess.Popen(
                self._command(index),
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
            log.close()  # the child holds its own copy
        deadline = time.monotonic() + timeout
        for index in range(len(self.names)):
            self.wait_healthy(index, deadline)

    def _get_json(self, index: int, path: str, body: object = None) -> dict[str, object]:
        url = f"{self.scheme}://127.0.0.1:{self.client_ports[index]}{path}"
        data = None if body is None else json.dumps(body).encode()
        context = None
        if self.tls is not None:
            context = ssl.create_default_context(cafile=self.tls["ca"])
            context.load_cert_chain(self.tls["cert"], self.tls["key"])
        with urllib.request.urlopen(url, data=data, timeout=1.0, context=context) as response:
            parsed: dict[str, object] = json.loads(response.read())
            return parsed

    def wait_healthy(self, index: int, deadline: float) -> None:
        while True:
            process = self.processes[index]
            if process is None or process.poll() is not None:
                log = (self.dir / f"{self.names[index]}.log").read_text(errors="replace")
                raise RuntimeError(f"etcd member {index} is not running:\n{log[-2000:]}")
            try:
                if self._get_json(index, "/health").get("health") == "true":
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd member {index} not healthy in time")
            time.sleep(0.05)

    def leader(self) -> int:
        """The index of the current leader, as a live member reports it."""
        live = self._any_live()
        leader_id = str(self._get_json(live, "/v3/maintenance/status", {})["leader"])
        members = self._get_json(live, "/v3/cluster/member/list", {})["members"]
        assert isinstance(members, list)
        names = {str(member["ID"]): member["name"] for member in members}
        return self.names.index(names[leader_id])

    def _any_live(self) -> int:
        for index, process in enumerate(self.processes):
            if process is not None and process.poll() is None:
                return index
        raise RuntimeError("no live etcd member")

    def kill(self, index: int) -> None:
        """SIGKILL one member (ours, by PID) and reap it."""
        process = self.processes[index]
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(10)

    def stop(self) -> None:
        """Stop every member we started (TERM, then KILL after 1 s) and remove the data dir.

        A member whose peers are gone spends seconds trying to hand over leadership on TERM;
        its data is thrown away here, so it gets no more than a second.
        """
        try:
            for process in self.processes:
                if process is not None and process.poll() is None:
                    process.terminate()
            for process in self.processes:
                if process is None:
                    continue
                try:
                    process.wait(1)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


@contextmanager
def etcd_cluster(
    size: int = 1, *, tls: bool = False, extra: Sequence[str] = ()
) -> Iterator[EtcdCluster]:
    """A started cluster of ``size`` members, stopped and removed on exit."""
    cluster = EtcdCluster(size, tls=tls, extra=extra)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
