"""A real Kubernetes control plane for tests, started from a directory of binaries.

Why: the simulator models only part of Kubernetes (docs/simulator.md says what it leaves out),
and a real control plane keeps finding what it let through (the same page lists each catch and
the simulator test that now holds it). Tests that must hold on real clusters run against the
real ``etcd``, ``kube-apiserver``, ``kube-controller-manager`` and ``kube-scheduler`` as well,
started once per test session by :class:`ControlPlane`.

The binaries are found the way envtest finds its assets: ``KUBEBUILDER_ASSETS`` names a
directory of plain binaries (:func:`find_binaries`; docs/testing.md says how to fill one).

:class:`ControlPlane` makes its own certificates (a cluster CA, a front-proxy CA, a serving
certificate, client certificates for the scheduler and controller-manager), a static admin
token in ``system:masters``, an RSA key that signs ServiceAccount tokens (so TokenRequest works:
:meth:`ControlPlane.service_account_kubeconfig`), enables RBAC, and writes an admin kubeconfig.
Every component listens on a free loopback port. The API server keeps an audit log (metadata
only) of the requests of every identity that is neither an administrator nor part of the
control plane, so tests can see what a ServiceAccount actually did
(:meth:`ControlPlane.audit_events`). Children die with the test process even when it is killed
(``PR_SET_PDEATHSIG``); :meth:`ControlPlane.stop` ends them in order.
"""

import asyncio
import base64
import contextlib
import ctypes
import datetime
import ipaddress
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tidegate.bus.server import free_port
from tidegate.kube import KubeClient

ASSETS_ENV = "KUBEBUILDER_ASSETS"
"""envtest's variable: a directory holding the control plane's binaries."""
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
"""What a binaries directory must hold."""
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/24"
LOG_TAIL_CHARS = 3000

_PR_SET_PDEATHSIG = 1


class ControlPlaneError(RuntimeError):
    """The control plane could not be found or started (the message says why)."""


def missing_binaries(directory: Path) -> list[str]:
    """The names in :data:`BINARIES` that ``directory`` lacks as executable files."""
    return [
        name
        for name in BINARIES
        if not (directory / name).is_file() or not os.access(directory / name, os.X_OK)
    ]


def find_binaries(environ: Mapping[str, str] | None = None) -> Path | None:
    """The directory ``KUBEBUILDER_ASSETS`` names, if it holds every binary; else None."""
    value = (environ if environ is not None else os.environ).get(ASSETS_ENV)
    if not value:
        return None
    directory = Path(value).resolve()
    return directory if not missing_binaries(directory) else None


# --- certificates -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Issued:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _ca(common_name: str) -> _Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=7))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _Issued(cert, key)


def _leaf(
    ca: _Issued,
    common_name: str,
    *,
    organization: str | None = None,
    server_names: tuple[str, ...] = (),
) -> _Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organization))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=7))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH]
                if server_names
                else [ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    if server_names:
        alt: list[x509.GeneralName] = []
        for entry in server_names:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(entry)))
            except ValueError:
                alt.append(x509.DNSName(entry))
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    return _Issued(builder.sign(ca.key, hashes.SHA256()), key)


def _cert_pem(issued: _Issued) -> bytes:
    return issued.cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def serving_certificate(
    ca_cert_pem: bytes, ca_key_pem: bytes, names: tuple[str, ...], directory: Path
) -> tuple[Path, Path]:
    """A TLS serving certificate for ``names`` (IP addresses or DNS names) signed by the CA
    given in PEM; written to ``directory`` as ``tls.crt`` / ``tls.key``.

    For servers the API server must call (an admission webhook): register the CA as its
    ``caBundle``.
    """
    key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ControlPlaneError("the CA key is not an EC key made by this module")
    ca = _Issued(x509.load_pem_x509_certificate(ca_cert_pem), key)
    issued = _leaf(ca, names[0], server_names=names)
    directory.mkdir(parents=True, exist_ok=True)
    cert, private = directory / "tls.crt", directory / "tls.key"
    cert.write_bytes(_cert_pem(issued))
    private.write_bytes(_key_pem(issued.key))
    private.chmod(0o600)
    return cert, private


def kubeconfig_text(
    server: str,
    ca_file: Path,
    *,
    user: str,
    token: str | None = None,
    client_cert: Path | None = None,
    client_key: Path | None = None,
    namespace: str | None = None,
) -> str:
    """A one-context kubeconfig (JSON, which is YAML) for ``server``."""
    credentials: dict[str, str] = {}
    if token is not None:
        credentials["token"] = token
    if client_cert is not None and client_key is not None:
        credentials["client-certificate"] = str(client_cert)
        credentials["client-key"] = str(client_key)
    context: dict[str, str] = {"cluster": "tidegate-test", "user": user}
    if namespace:
        context["namespace"] = namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "tidegate-test",
                "cluster": {"server": server, "certificate-authority": str(ca_file)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "tidegate-test", "context": context}],
        "current-context": "tidegate-test",
    }
    return json.dumps(config, indent=2) + "\n"


# --- processes ----------------------------------------------------------------------------


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: if the test process dies (even by SIGKILL),
    # the kernel kills this child too, so no etcd or API server outlives an interrupted run.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:  # the parent is already gone
        os._exit(1)


@dataclass
class _Component:
    name: str
    process: "subprocess.Popen[bytes]"
    log_path: Path
    log: IO[bytes]

    def tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]


AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        # Administrators (the tests themselves) and the control plane's own components are
        # not what anyone audits here: only the identities the software under test uses.
        {"level": "None", "userGroups": ["system:masters", "system:nodes"]},
        {
            "level": "None",
            "users": [
                "system:kube-scheduler",
                "system:kube-controller-manager",
                "system:apiserver",
                "system:anonymous",
            ],
        },
        {"level": "None", "userGroups": ["system:serviceaccounts:kube-system"]},
        {"level": "Metadata"},
    ],
}


@dataclass
class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback ports.

    Create with :meth:`start` (blocks until the API server is ready and the controllers and
    scheduler answer their health checks); :meth:`stop` ends everything. Usable as a context
    manager.
    """

    binaries: Path
    workdir: Path
    server: str = ""
    """The API server's URL (``https://127.0.0.1:PORT``)."""
    admin_token: str = field(default_factory=lambda: uuid.uuid4().hex)
    """A static bearer token of a ``system:masters`` user."""
    etcd_url: str = ""
    """etcd's client URL (plain HTTP on loopback)."""
    _components: list[_Component] = field(default_factory=list)

    @property
    def ca_file(self) -> Path:
        """The cluster CA in PEM: it signed the API server's serving certificate."""
        return self.workdir / "pki" / "ca.crt"

    @property
    def ca_key_file(self) -> Path:
        """The cluster CA's key (for :func:`serving_certificate`)."""
        return self.workdir / "pki" / "ca.key"

    @property
    def kubeconfig(self) -> Path:
        """An admin kubeconfig (static token, ``system:masters``)."""
        return self.workdir / "admin.kubeconfig"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log (JSON lines, metadata level)."""
        return self.workdir / "audit.log"

    @classmethod
    def start(
        cls, binaries: Path, workdir: Path, *, ready_within_seconds: float = 90.0
    ) -> "ControlPlane":
        """Start a control plane from ``binaries`` with its files under ``workdir``."""
        missing = missing_binaries(binaries)
        if missing:
            raise ControlPlaneError(f"{binaries} lacks {', '.join(missing)}")
        plane = cls(binaries=binaries.resolve(), workdir=workdir.resolve())
        try:
            plane._start(ready_within_seconds)
        except BaseException:
            plane.stop()
            raise
        return plane

    def __enter__(self) -> "ControlPlane":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self, ready_within: float) -> None:
        deadline = time.monotonic() + ready_within
        pki = self.workdir / "pki"
        logs = self.workdir / "logs"
        for directory in (pki, logs):
            directory.mkdir(parents=True, exist_ok=True)
        files = self._write_pki(pki)

        etcd_port, etcd_peer = free_port(), free_port()
        api_port = free_port()
        self.server = f"https://127.0.0.1:{api_port}"
        etcd_url = self.etcd_url = f"http://127.0.0.1:{etcd_port}"
        self._spawn(
            "etcd",
            [
                "--name=tidegate-test",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-cluster=tidegate-test=http://127.0.0.1:{etcd_peer}",
                "--log-level=warn",
            ],
        )
        # The API server's watch cache starts at etcd's revision when it comes up and keeps
        # every later event for a while: a little history first, so that resourceVersion "1"
        # is out of the cache's window from the start and a watch from it is answered 410.
        self._wait(deadline, "etcd to take writes", self._advance_etcd_revision)
        (self.workdir / "tokens.csv").write_text(
            f'{self.admin_token},tidegate-admin,tidegate-admin,"system:masters"\n'
        )
        (self.workdir / "audit-policy.json").write_text(json.dumps(AUDIT_POLICY))
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={etcd_url}",
                f"--secure-port={api_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--tls-cert-file={files['apiserver.crt']}",
                f"--tls-private-key-file={files['apiserver.key']}",
                f"--client-ca-file={files['ca.crt']}",
                f"--token-auth-file={self.workdir / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={files['sa.pub']}",
                f"--service-account-signing-key-file={files['sa.key']}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                f"--requestheader-client-ca-file={files['front-proxy-ca.crt']}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={files['front-proxy-client.crt']}",
                f"--proxy-client-key-file={files['front-proxy-client.key']}",
                f"--audit-policy-file={self.workdir / 'audit-policy.json'}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-maxsize=0",
                "--audit-log-mode=blocking",
            ],
        )
        self._wait_api_ready(deadline)

        self.kubeconfig.write_text(
            kubeconfig_text(
                self.server, self.ca_file, user="tidegate-admin", token=self.admin_token
            )
        )
        for component in ("kube-controller-manager", "kube-scheduler"):
            (self.workdir / f"{component}.kubeconfig").write_text(
                kubeconfig_text(
                    self.server,
                    self.ca_file,
                    user=f"system:{component}",
                    client_cert=files[f"{component}.crt"],
                    client_key=files[f"{component}.key"],
                )
            )
        cm_port, sched_port = free_port(), free_port()
        cm_config = self.workdir / "kube-controller-manager.kubeconfig"
        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={cm_config}",
                f"--authentication-kubeconfig={cm_config}",
                f"--authorization-kubeconfig={cm_config}",
                "--use-service-account-credentials",
                f"--service-account-private-key-file={files['sa.key']}",
                f"--root-ca-file={files['ca.crt']}",
                f"--cluster-signing-cert-file={files['ca.crt']}",
                f"--cluster-signing-key-file={files['ca.key']}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={cm_port}",
                f"--cert-dir={self.workdir / 'kcm-certs'}",
                f"--flex-volume-plugin-dir={self.workdir / 'flexvolume'}",
                "--kube-api-qps=100",
                "--kube-api-burst=200",
            ],
        )
        sched_config = self.workdir / "kube-scheduler.kubeconfig"
        self._spawn(
            "kube-scheduler",
            [
                f"--kubeconfig={sched_config}",
                f"--authentication-kubeconfig={sched_config}",
                f"--authorization-kubeconfig={sched_config}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={sched_port}",
                f"--cert-dir={self.workdir / 'scheduler-certs'}",
            ],
        )
        self._wait_healthy("kube-controller-manager", cm_port, deadline)
        self._wait_healthy("kube-scheduler", sched_port, deadline)
        # The ServiceAccount admission plugin refuses pods until the controller-manager has
        # made a namespace's "default" ServiceAccount: wait for the first one as a sign that
        # the controllers run.
        self._wait(
            deadline,
            "the controller-manager to create the default ServiceAccount",
            lambda: self._get("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
        )

    def _write_pki(self, pki: Path) -> dict[str, Path]:
        ca = _ca("tidegate-test-ca")
        front = _ca("tidegate-test-front-proxy-ca")
        issued = {
            "ca": ca,
            "front-proxy-ca": front,
            "apiserver": _leaf(
                ca,
                "kube-apiserver",
                server_names=(
                    "127.0.0.1",
                    "localhost",
                    "10.96.0.1",
                    "kubernetes",
                    "kubernetes.default",
                    "kubernetes.default.svc",
                ),
            ),
            "kube-controller-manager": _leaf(ca, "system:kube-controller-manager"),
            "kube-scheduler": _leaf(ca, "system:kube-scheduler"),
            "front-proxy-client": _leaf(front, "front-proxy-client"),
        }
        files: dict[str, Path] = {}
        for name, item in issued.items():
            files[f"{name}.crt"] = pki / f"{name}.crt"
            files[f"{name}.key"] = pki / f"{name}.key"
            files[f"{name}.crt"].write_bytes(_cert_pem(item))
            files[f"{name}.key"].write_bytes(_key_pem(item.key))
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        files["sa.key"] = pki / "sa.key"
        files["sa.pub"] = pki / "sa.pub"
        files["sa.key"].write_bytes(_key_pem(sa_key))
        files["sa.pub"].write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        for path in pki.glob("*.key"):
            path.chmod(0o600)
        return files

    def _spawn(self, name: str, args: list[str]) -> None:
        log_path = self.workdir / "logs" / f"{name}.log"
        log = log_path.open("ab")
        try:
            process = subprocess.Popen(
                [str(self.binaries / name), *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                preexec_fn=_die_with_parent,
            )
        except BaseException:
            log.close()
            raise
        self._components.append(_Component(name, process, log_path, log))

    def _check_alive(self) -> None:
        for component in self._components:
            code = component.process.poll()
            if code is not None:
                raise ControlPlaneError(
                    f"{component.name} exited with {code}; its log ends:\n{component.tail()}"
                )

    def _wait(self, deadline: float, what: str, check: Callable[[], bool]) -> None:
        while True:
            self._check_alive()
            try:
                if check():
                    return
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {c.name}:\n{c.tail()}" for c in self._components)
                raise ControlPlaneError(f"timed out waiting for {what}\n{logs}")
            time.sleep(0.1)

    def _ssl(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _get(self, path: str) -> tuple[int, bytes]:
        request = urllib.request.Request(
            self.server + path, headers={"Authorization": f"Bearer {self.admin_token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=5, context=self._ssl()) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def _wait_api_ready(self, deadline: float) -> None:
        self._wait(deadline, "kube-apiserver /readyz", lambda: self._get("/readyz")[0] == 200)

    def _wait_healthy(self, name: str, port: int, deadline: float) -> None:
        # Their serving certificates are self-signed in their cert dirs; only liveness matters.
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE

        def healthy() -> bool:
            url = f"https://127.0.0.1:{port}/healthz"
            with urllib.request.urlopen(url, timeout=5, context=insecure) as response:
                return bool(response.status == 200)

        self._wait(deadline, f"{name} /healthz", healthy)

    def stop(self, *, within_seconds: float = 10.0) -> None:
        """Stop every component (scheduler first, etcd last): SIGTERM, then SIGKILL."""
        for component in reversed(self._components):
            if component.process.poll() is None:
                component.process.terminate()
                try:
                    component.process.wait(within_seconds)
                except subprocess.TimeoutExpired:
                    component.process.kill()
                    component.process.wait()
            component.log.close()
        self._components.clear()

    def _etcd(self, path: str, body: dict[str, object]) -> dict[str, object]:
        request = urllib.request.Request(
            self.etcd_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            answer: dict[str, object] = json.loads(response.read())
            return answer

    def _advance_etcd_revision(self) -> bool:
        for index in range(20):
            key = base64.b64encode(f"/tidegate-test/history/{index}".encode()).decode()
            self._etcd("/v3/kv/put", {"key": key, "value": "AA=="})
        return True

    def compact(self) -> int:
        """Compact etcd's history up to its current revision, so every resourceVersion seen so
        far is too old to watch from (410 Gone); the revision compacted to."""
        header = self._etcd("/v3/kv/range", {"key": "AA=="})["header"]
        assert isinstance(header, dict)
        revision = int(header["revision"])
        self._etcd("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def pids(self) -> dict[str, int]:
        """Process ids of the running components, by name."""
        return {c.name: c.process.pid for c in self._components if c.process.poll() is None}

    def logs(self) -> dict[str, Path]:
        """Each component's log file (standard output and error), by name."""
        return {c.name: c.log_path for c in self._components}

    async def service_account_token(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        *,
        expiration_seconds: int = 3600,
    ) -> str:
        """A token for ServiceAccount ``namespace/name`` minted by TokenRequest through
        ``client`` (which must be allowed to create ``serviceaccounts/token``)."""
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_seconds},
        }
        data = await client.transport.request(
            "POST", path, operation=f"token for {namespace}/{name}", body=body, idempotent=False
        )
        token = json.loads(data).get("status", {}).get("token")
        if not isinstance(token, str) or not token:
            raise ControlPlaneError(f"TokenRequest for {namespace}/{name} returned no token")
        return token

    async def service_account_kubeconfig(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        path: Path,
        *,
        expiration_seconds: int = 3600,
    ) -> Path:
        """Write to ``path`` a kubeconfig that acts as ServiceAccount ``namespace/name`` (a
        token minted by TokenRequest); the ServiceAccount must exist."""
        token = await self.service_account_token(
            client, namespace, name, expiration_seconds=expiration_seconds
        )
        text = kubeconfig_text(
            self.server,
            self.ca_file,
            user=f"system:serviceaccount:{namespace}:{name}",
            token=token,
            namespace=namespace,
        )
        await asyncio.to_thread(path.write_text, text)
        return path

    def audit_events(self) -> Iterator[dict[str, object]]:
        """The audit log's events so far (requests by identities other than administrators
        and the control plane's own components)."""
        try:
            text = self.audit_log.read_text()
        except FileNotFoundError:
            return
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict):
                    yield event


def _main(argv: list[str]) -> int:
    """``up WORKDIR``: run a control plane from KUBEBUILDER_ASSETS until interrupted, its admin
    kubeconfig in WORKDIR (for ``tidegate demo --kubeconfig`` and the benchmarks)."""
    if len(argv) == 2 and argv[0] == "up":
        binaries = find_binaries()
        if binaries is None:
            sys.stderr.write("no Kubernetes binaries: set KUBEBUILDER_ASSETS (docs/testing.md)\n")
            return 1
        workdir = Path(argv[1])
        workdir.mkdir(parents=True, exist_ok=True)
        with ControlPlane.start(binaries, workdir) as plane:
            sys.stdout.write(f"control plane up; kubeconfig: {plane.kubeconfig} (Ctrl-C stops)\n")
            sys.stdout.flush()
            stop = {signal.SIGINT, signal.SIGTERM}
            signal.pthread_sigmask(signal.SIG_BLOCK, stop)
            signal.sigwait(stop)
        return 0
    sys.stderr.write("usage: python -m tidegate.testing.controlplane up WORKDIR\n")
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
