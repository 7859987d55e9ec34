"""The Kubernetes Lease adapter: executes the lock machine's requests on the API
server's ``coordination.k8s.io/v1`` Leases with httpx.

``KubernetesLeaseBackend.from_kubeconfig()`` (the current context of ``$KUBECONFIG`` or
``~/.kube/config``) or ``KubernetesLeaseBackend.in_cluster()`` (the pod's service
account) make the client; ``KubernetesLeaseBackend(httpx.Client(...), server)`` takes
one you configured. A blocking ``httpx.Client`` serves ``with lock``; an
``httpx.AsyncClient`` serves ``async with lock``. Requires ``httpx`` and, for
kubeconfig files, ``pyyaml`` (the ``kubernetes`` extra: ``pip install
fencepost[kubernetes]``). The service account needs ``get``, ``create`` and ``update``
and ``patch`` on ``leases`` in the namespace.

**One lock, one Lease.** ``Lock(backend, "my-app")`` is the Lease ``my-app`` in the
backend's namespace (a lock name must be a DNS-1123 subdomain; ``ttl`` whole seconds,
at least 1). The Lease's fields mean what client-go's leader election makes them
mean, so a fencepost lock and a client-go elector on the same Lease exclude each
other: ``holderIdentity`` is the holder's owner id (``lease.owner_id``) or ``""``
when free, ``leaseDurationSeconds`` its TTL, ``acquireTime`` / ``renewTime`` wall-clock
stamps, ``leaseTransitions`` a counter.

**Tokens**: ``leaseTransitions``, which fencepost raises by one on **every** grant
(client-go raises it only when the holder changes): one counter in one object, changed
only by compare-and-set on its ``resourceVersion``, so it never goes back while the
Lease exists and ``purpose="correctness"`` needs no opt-in. Deleting the Lease
restarts it at 1: never delete the Lease of a fenced lock (or pass ``token_floor``
above the highest token the resource saw).

**Expiry** is never judged by comparing ``renewTime`` with this machine's clock: a
contender treats a Lease as expired once it has stayed unchanged (same
``resourceVersion``) for the ``leaseDurationSeconds`` it states, counted on its own
monotonic clock from the first reply that showed it. The holder's validity is measured
from the send of its last successful update (``send + ttl × (1 − drift) − margin``)
and it is lost on time even when the API server hangs.

**Holder metadata, inspection, followers.** ``Lock(backend, name, metadata=...)``
stores the metadata in the Lease's ``fencepost.dev/holder-metadata`` annotation (with
the owner id; client-go electors keep annotations and never read it);
:meth:`KubernetesLeaseBackend.inspect` / :meth:`~KubernetesLeaseBackend.list` read
holders back (``list`` pages with ``limit`` and ``continue``), and an election's
followers (``Election.leader()``, ``observe()``) read the leader's identity and value
from that annotation. A holder's ``ttl_left`` is the record's ``leaseDurationSeconds``,
an upper bound, never wall-clock arithmetic.

**Timestamps** (``acquireTime``, ``renewTime``) are written by this adapter from the
wall clock just before each request is sent, as ``MicroTime`` (RFC 3339 UTC with
microseconds); no decision reads them.

**Timeouts.** Each call gets the client's timeout (1 s for the clients this module
makes), capped by the time left before the request's deadline: keep it well below
``ttl / 3``.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import ssl
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple, Union

from . import _core
from ._backend import Backend
from ._holder import Holder
from .errors import BackendError, ConfigError

if TYPE_CHECKING:
    import httpx

    from ._core import KubernetesSpec

__all__ = ["KubernetesLeaseBackend"]

#: Where a pod's service account is mounted.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def _import_httpx() -> Any:
    try:
        import httpx
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError("fencepost.kubernetes needs httpx: pip install 'fencepost[kubernetes]'") from exc
    return httpx


def micro_time() -> str:
    """The wall clock now as a Kubernetes ``MicroTime``: ``2026-12-01T16:02:29.123456Z``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _ssl_context(
    ca_file: Optional[str] = None,
    ca_data: Optional[str] = None,
    cert_data: Optional[Tuple[bytes, bytes]] = None,
) -> ssl.SSLContext:
    """A client TLS context trusting ``ca_file`` / ``ca_data`` (PEM; the system's CAs
    when neither) with an optional client certificate and key (PEM bytes)."""
    ctx = ssl.create_default_context(cafile=ca_file, cadata=ca_data)
    if cert_data is not None:
        # ssl loads certificates from files only: a private temporary directory, gone
        # once they are loaded
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for i, data in enumerate(cert_data):
                path = os.path.join(d, f"{i}.pem")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                paths.append(path)
            ctx.load_cert_chain(paths[0], paths[1])
    return ctx


class KubernetesLeaseBackend(Backend):
    """Locks on Kubernetes ``coordination.k8s.io/v1`` Leases, one Lease per lock name,
    through an httpx client.

    Args:
        client: ``httpx.Client`` for the blocking API, or ``httpx.AsyncClient`` for
            asyncio, configured with the server's TLS settings (CA, client
            certificate). Its ``base_url`` is not used.
        server: the API server's URL (``https://10.0.0.1:6443``).
        namespace: the namespace of the Leases (``"default"``).
        token: a bearer token sent with every request, or None.
        token_file: a file holding the bearer token (a service account's), read again
            whenever it changes (projected tokens are rotated); or None.

    Raises:
        ConfigError: ``client`` is not an httpx client, ``server`` is not an
            ``http(s)://`` URL, ``namespace`` is not a DNS-1123 label (checked when a
            lock is built), or both ``token`` and ``token_file`` are given.
    """

    def __init__(
        self,
        client: Union[httpx.Client, httpx.AsyncClient, Any],
        server: str,
        *,
        namespace: str = "default",
        token: Optional[str] = None,
        token_file: Optional[str] = None,
    ) -> None:
        super().__init__()
        httpx_mod = _import_httpx()
        if isinstance(client, httpx_mod.AsyncClient):
            self._is_async = True
        elif isinstance(client, httpx_mod.Client):
            self._is_async = False
        else:
            raise ConfigError(f"client must be an httpx.Client or httpx.AsyncClient, got {client!r}")
        if not isinstance(server, str) or not server.startswith(("http://", "https://")):
            raise ConfigError(f"server must be the API server's http:// or https:// URL, got {server!r}")
        if not isinstance(namespace, str):
            raise ConfigError(f"namespace must be a str, got {namespace!r}")
        if token is not None and token_file is not None:
            raise ConfigError("give token or token_file, not both")
        if token is not None and not isinstance(token, str):
            raise ConfigError(f"token must be a str, got {type(token).__name__}")
        self._client: Any = client
        self._httpx = httpx_mod
        self._server = server.rstrip("/")
        self._namespace = namespace
        self._token = token
        self._token_file = token_file
        self._token_seen: Tuple[float, str] = (-1.0, "")
        self._token_lock = threading.Lock()
        self.supports_async = self._is_async
        self.supports_sync = not self._is_async

    # -- configuration --

    @classmethod
    def _owned_client(
        cls,
        server: str,
        verify: Union[ssl.SSLContext, bool],
        *,
        asyncio: bool,
        timeout: float,
        namespace: str,
        token: Optional[str] = None,
        token_file: Optional[str] = None,
    ) -> KubernetesLeaseBackend:
        httpx_mod = _import_httpx()
        make = httpx_mod.AsyncClient if asyncio else httpx_mod.Client
        client = make(timeout=timeout, verify=verify)
        try:
            backend = cls(client, server, namespace=namespace, token=token, token_file=token_file)
        except BaseException:
            if not asyncio:
                client.close()
            raise
        backend._own(client.aclose if asyncio else client.close)
        return backend

    @classmethod
    def from_kubeconfig(
        cls,
        path: Optional[str] = None,
        *,
        context: Optional[str] = None,
        namespace: Optional[str] = None,
        asyncio: bool = False,
        timeout: float = 1.0,
    ) -> KubernetesLeaseBackend:
        """A backend for a kubeconfig context, on an httpx client it makes and owns.

        Args:
            path: the kubeconfig file; default the first file of ``$KUBECONFIG``, else
                ``~/.kube/config``.
            context: the context to use; default the file's ``current-context``.
            namespace: the Leases' namespace; default the context's, else ``"default"``.
            asyncio: make an ``httpx.AsyncClient`` instead of an ``httpx.Client``.
            timeout: the client's timeout in seconds.

        Reads the cluster's ``server``, ``certificate-authority`` /
        ``certificate-authority-data`` and ``insecure-skip-tls-verify``, and the user's
        ``token``, ``tokenFile``, ``client-certificate`` / ``client-certificate-data``
        and ``client-key`` / ``client-key-data``; relative paths are relative to the
        file.

        Raises:
            ConfigError: the file is missing or not a kubeconfig; the context, its
                cluster or user is not in it; the user authenticates with ``exec`` or
                ``auth-provider`` plugins (not supported: give a token); pyyaml or
                httpx is not installed.
        """
        if path is None:
            env = os.environ.get("KUBECONFIG", "")
            path = next((p for p in env.split(os.pathsep) if p), os.path.expanduser("~/.kube/config"))
        try:
            import yaml
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ConfigError("reading a kubeconfig needs pyyaml: pip install 'fencepost[kubernetes]'") from exc
        try:
            with open(path, encoding="utf-8") as f:
                doc = yaml.safe_load(f)
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read the kubeconfig {path!r}: {exc}") from exc
        if not isinstance(doc, dict):
            raise ConfigError(f"{path!r} is not a kubeconfig (a mapping with clusters, users, contexts)")
        base = os.path.dirname(os.path.abspath(path))

        def named(section: str, name: Any) -> Dict[str, Any]:
            for entry in doc.get(section) or []:
                if isinstance(entry, dict) and entry.get("name") == name:
                    inner = entry.get(section[:-1])
                    return inner if isinstance(inner, dict) else {}
            raise ConfigError(f"kubeconfig {path!r} has no {section[:-1]} named {name!r}")

        ctx_name = context if context is not None else doc.get("current-context")
        if not ctx_name:
            raise ConfigError(f"kubeconfig {path!r} has no current-context: pass context=")
        ctx = named("contexts", ctx_name)
        cluster = named("clusters", ctx.get("cluster"))
        user = named("users", ctx.get("user")) if ctx.get("user") else {}
        for plugin in ("exec", "auth-provider"):
            if plugin in user:
                raise ConfigError(
                    f"kubeconfig user {ctx.get('user')!r} authenticates with {plugin!r}, which "
                    "fencepost does not run: give the user a token or a client certificate"
                )
        server = cluster.get("server")
        if not isinstance(server, str):
            raise ConfigError(f"kubeconfig cluster {ctx.get('cluster')!r} has no server")

        def file(value: Any) -> Optional[str]:
            return None if not value else os.path.join(base, os.path.expanduser(str(value)))

        def data(value: Any) -> Optional[bytes]:
            return None if not value else base64.b64decode(str(value))

        verify: Union[ssl.SSLContext, bool] = True
        if server.startswith("https://"):
            if cluster.get("insecure-skip-tls-verify"):
                verify = False
            else:
                ca = data(cluster.get("certificate-authority-data"))
                cert_data: Optional[Tuple[bytes, bytes]] = None
                c_file, k_file = file(user.get("client-certificate")), file(user.get("client-key"))
                c_data, k_data = data(user.get("client-certificate-data")), data(user.get("client-key-data"))
                try:
                    if c_file or c_data:
                        with open(c_file or os.devnull, "rb") as cf, open(k_file or os.devnull, "rb") as kf:
                            cert_data = (c_data or cf.read(), k_data or kf.read())
                    verify = _ssl_context(
                        ca_file=file(cluster.get("certificate-authority")),
                        ca_data=ca.decode() if ca else None,
                        cert_data=cert_data,
                    )
                except (OSError, ssl.SSLError, ValueError) as exc:
                    raise ConfigError(f"kubeconfig {path!r}: cannot load its TLS settings: {exc}") from exc
        token = user.get("token")
        return cls._owned_client(
            server,
            verify,
            asyncio=asyncio,
            timeout=timeout,
            namespace=namespace or ctx.get("namespace") or "default",
            token=str(token) if token else None,
            token_file=file(user.get("tokenFile")) if not token else None,
        )

    @classmethod
    def in_cluster(
        cls,
        *,
        namespace: Optional[str] = None,
        asyncio: bool = False,
        timeout: float = 1.0,
        service_account_dir: str = SERVICE_ACCOUNT_DIR,
        environ: Optional[Mapping[str, str]] = None,
    ) -> KubernetesLeaseBackend:
        """A backend for the cluster this pod runs in, on an httpx client it makes and
        owns: the API server at ``KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT``
        (https), the service account's ``token`` (read again when it is rotated) and
        ``ca.crt`` under ``service_account_dir``, and its ``namespace`` file unless
        ``namespace`` is given. ``environ`` replaces ``os.environ`` (tests).

        Raises:
            ConfigError: not in a cluster (the variables or files are missing).
        """
        env = os.environ if environ is None else environ
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
        if not host or not port:
            raise ConfigError(
                "not running in a Kubernetes pod: KUBERNETES_SERVICE_HOST and "
                "KUBERNETES_SERVICE_PORT are not set (use from_kubeconfig())"
            )
        if ":" in host:
            host = f"[{host}]"  # IPv6
        token_file = os.path.join(service_account_dir, "token")
        ca_file = os.path.join(service_account_dir, "ca.crt")
        if not os.path.exists(token_file):
            raise ConfigError(f"no service account token at {token_file!r}")
        if namespace is None:
            try:
                with open(os.path.join(service_account_dir, "namespace"), encoding="utf-8") as f:
                    namespace = f.read().strip()
            except OSError as exc:
                raise ConfigError(f"cannot read the service account's namespace: {exc}") from exc
        try:
            verify = _ssl_context(ca_file=ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load the service account's CA {ca_file!r}: {exc}") from exc
        return cls._owned_client(
            f"https://{host}:{port}",
            verify,
            asyncio=asyncio,
            timeout=timeout,
            namespace=namespace,
            token_file=token_file,
        )

    # -- properties --

    @property
    def client(self) -> Any:
        """The httpx client this backend uses."""
        return self._client

    @property
    def server(self) -> str:
        """The API server's URL."""
        return self._server

    @property
    def namespace(self) -> str:
        """The namespace of the Leases."""
        return self._namespace

    def _machine_spec(self) -> KubernetesSpec:
        return {"kind": "kubernetes", "namespace": self._namespace}

    def lease_path(self, name: str) -> str:
        """The API path of lock ``name``'s Lease."""
        return f"/apis/coordination.k8s.io/v1/namespaces/{self._namespace}/leases/{name}"

    def lock_key(self, name: str) -> str:
        """The Lease of lock ``name``, as its API path."""
        return self.lease_path(name)

    def token_key(self, name: str) -> str:
        """The token is the Lease's ``spec.leaseTransitions``: returns the Lease's path."""
        return self.lease_path(name)

    def _mode_error(self, wanted: str) -> ConfigError:
        if wanted == "async":
            return ConfigError(
                "this KubernetesLeaseBackend wraps a blocking httpx.Client: use `with lock`, "
                "or give it an httpx.AsyncClient (asyncio=True) for `async with lock`"
            )
        return ConfigError(
            "this KubernetesLeaseBackend wraps an httpx.AsyncClient: use `async with lock`, "
            "or give it an httpx.Client for `with lock`"
        )

    def _sync_call_limit_s(self) -> Optional[float]:
        """How long one blocking request can take (pool + connect + write + read), or
        None when a timeout is unlimited (see :meth:`fencepost.Backend._sync_call_limit_s`)."""
        if self._is_async:
            return None
        t = getattr(self._client, "timeout", None)
        parts = [getattr(t, n, None) for n in ("pool", "connect", "write", "read")]
        if not all(isinstance(p, (int, float)) for p in parts):
            return None
        return float(sum(parts))  # type: ignore[arg-type]

    # -- execution --

    def _bearer(self) -> Optional[str]:
        if self._token_file is None:
            return self._token
        try:
            mtime = os.stat(self._token_file).st_mtime
        except OSError as exc:
            raise BackendError(f"cannot read the token file {self._token_file!r}: {exc}") from exc
        with self._token_lock:
            if mtime != self._token_seen[0]:
                with open(self._token_file, encoding="utf-8") as f:
                    self._token_seen = (mtime, f.read().strip())
            return self._token_seen[1]

    def _prepare(self, command: Any) -> Tuple[Any, Optional[bytes], Dict[str, str]]:
        call = command.body if isinstance(command, _core.Request) else command
        if not isinstance(call, _core.KubernetesCall):
            raise ConfigError(f"KubernetesLeaseBackend cannot run {command!r}")
        body = call.body
        if body is not None and call.stamp:
            doc = json.loads(body)
            now = micro_time()
            for field in call.stamp:
                doc["spec"][field] = now
            body = json.dumps(doc, separators=(",", ":"))
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = call.content_type
        token = self._bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return call, None if body is None else body.encode(), headers

    def _timeout(self, command: Any) -> Any:
        """The client's timeouts, each capped by the time left before the request's
        deadline."""
        t = self._client.timeout
        deadline_ns = getattr(command, "deadline_ns", None)
        if not isinstance(deadline_ns, int):
            return t
        left = max((deadline_ns - time.monotonic_ns()) / 1e9, 0.001)

        def cap(v: Optional[float]) -> float:
            return left if v is None else min(v, left)

        return self._httpx.Timeout(connect=cap(t.connect), read=cap(t.read), write=cap(t.write), pool=cap(t.pool))

    @staticmethod
    def _answer(response: Any) -> str:
        """The reply for the machine: any JSON object body (a Lease or a Status); a
        body that is not one (a proxy's error page) is a transport failure."""
        text: str = response.text
        if text.lstrip().startswith("{"):
            return text
        raise BackendError(
            f"the API server answered HTTP {response.status_code} without a JSON body: {text[:200]!r}"
        )

    async def _execute_async(self, command: Any) -> object:
        if not self._is_async:
            raise self._mode_error("async")
        call, body, headers = self._prepare(command)
        response = await self._client.request(
            call.method, self._server + call.path, content=body, headers=headers, timeout=self._timeout(command)
        )
        return self._answer(response)

    def _execute_sync(self, command: Any) -> object:
        if self._is_async:
            raise self._mode_error("sync")
        call, body, headers = self._prepare(command)
        response = self._client.request(
            call.method, self._server + call.path, content=body, headers=headers, timeout=self._timeout(command)
        )
        return self._answer(response)

    # -- reading the Lease (observers) --

    def _read_call(self, name: str) -> Any:
        self._check_lock_options(name, {"ttl": 1_000_000_000})
        return _core.KubernetesCall.get(self._namespace, name)

    @staticmethod
    def _lease_of(name: str, reply: str) -> Optional[Dict[str, Any]]:
        doc = json.loads(reply)
        if doc.get("kind") == "Lease":
            return dict(doc)
        if doc.get("kind") == "Status" and doc.get("code") == 404:
            return None
        raise BackendError(f"reading Lease {name!r} failed: {doc.get('message', reply[:200])}")

    async def read_lease(self, name: str) -> Optional[Dict[str, Any]]:
        """The Lease of lock ``name`` as the API server holds it (a dict: ``metadata``,
        ``spec`` with ``holderIdentity``, ``leaseTransitions``, …), or None when there is
        none. Whether a holder's lease has expired is not in it: see the module docs.

        Raises:
            BackendError: the server could not be reached or refused the read.
            ConfigError: ``name`` is not a valid Lease name.
        """
        call = self._read_call(name)
        try:
            reply = str(await self._execute_async(call))
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise BackendError(f"reading Lease {name!r} failed: {exc}") from exc
        return self._lease_of(name, reply)

    def read_lease_sync(self, name: str) -> Optional[Dict[str, Any]]:
        """Blocking form of :meth:`read_lease`; same result and errors."""
        call = self._read_call(name)
        try:
            reply = str(self._execute_sync(call))
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise BackendError(f"reading Lease {name!r} failed: {exc}") from exc
        return self._lease_of(name, reply)

    # -- operator queries: who holds it? which locks are held? elections' leaders --
    #
    # The core reads the replies (``read_kubernetes_inspect``, ``read_kubernetes_list``):
    # the holder is ``holderIdentity``, the token ``leaseTransitions``, the metadata the
    # ``fencepost.dev/holder-metadata`` annotation while it names that holder.

    def _keeps_leader_metadata(self) -> bool:
        """An election keeps its leader's record in the Lease's metadata annotation."""
        return True

    def _list_call(self, prefix: object, limit: object, token: Optional[str]) -> Any:
        if not isinstance(prefix, str):
            raise ConfigError(f"prefix must be a str, got {prefix!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"limit must be an int >= 1, got {limit!r}")
        return _core.KubernetesCall.list_page(self._namespace, _core.KUBE_LIST_PAGE, token)

    async def inspect(self, name: str) -> Optional[Holder]:
        """Who holds lock ``name`` now, read from its Lease (one GET), or None when there
        is no Lease or it has no ``holderIdentity`` (released). The
        :class:`~fencepost.Holder` has ``owner`` = ``holderIdentity`` (a fencepost
        owner id, or a client-go elector's identity), ``token`` = ``leaseTransitions``,
        ``ttl_left`` = the record's ``leaseDurationSeconds`` (an upper bound: when the
        holder last renewed cannot be told without comparing its wall-clock
        ``renewTime`` with this clock, which fencepost never does; a holder that died
        shows as holding until a candidate has watched the record unchanged that long),
        ``waiters`` None (candidates leave no trace), and ``metadata`` from the
        ``fencepost.dev/holder-metadata`` annotation a grant with
        ``Lock(metadata=...)`` writes (None when the annotation names another holder).
        A snapshot for operators, never a substitute for acquiring.

        Raises:
            BackendError: the server could not be reached.
            ProtocolError: the server refused the read (a Status other than 404) or
                answered with something that is no Lease.
            ConfigError: ``name`` is not a valid Lease name, or the client's mode
                (asyncio or blocking) is the other one.
        """
        call = self._read_call(name)
        try:
            reply = str(await self._execute_async(call))
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise BackendError(f"inspect({name!r}) failed: {exc}") from exc
        found = _core.read_kubernetes_inspect(name, reply)
        return None if found is None else Holder._from_core(found)

    def inspect_sync(self, name: str) -> Optional[Holder]:
        """Blocking form of :meth:`inspect`; same arguments and errors."""
        call = self._read_call(name)
        try:
            reply = str(self._execute_sync(call))
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise BackendError(f"inspect({name!r}) failed: {exc}") from exc
        found = _core.read_kubernetes_inspect(name, reply)
        return None if found is None else Holder._from_core(found)

    @staticmethod
    def _listed(found: Dict[str, Holder], limit: int) -> List[Holder]:
        return [found[n] for n in sorted(found)][:limit]

    async def list(self, prefix: str = "", *, limit: int = 100) -> List[Holder]:
        """The held locks of the namespace whose names start with ``prefix``, at most
        ``limit``, sorted by name, each as :meth:`inspect` reads it. Paged: ``GET
        …/leases?limit=500`` and its ``continue`` token, at most
        ``fencepost._core.KUBE_LIST_PAGES`` (100) pages, stopping once ``limit`` held
        locks are found (the API has no name-prefix selector: the prefix is applied to
        each page).

        Raises:
            BackendError, ProtocolError: as :meth:`inspect`.
            ConfigError: ``prefix`` not a str, ``limit`` not an int >= 1.
        """
        found: Dict[str, Holder] = {}
        token: Optional[str] = None
        for _ in range(_core.KUBE_LIST_PAGES):
            call = self._list_call(prefix, limit, token)
            try:
                reply = str(await self._execute_async(call))
            except (ConfigError, BackendError):
                raise
            except Exception as exc:
                raise BackendError(f"list({prefix!r}) failed: {exc}") from exc
            token, holders = _core.read_kubernetes_list(prefix, reply)
            found.update((h["name"], Holder._from_core(h)) for h in holders)
            if token is None or len(found) >= limit:
                break
        return self._listed(found, limit)

    def list_sync(self, prefix: str = "", *, limit: int = 100) -> List[Holder]:
        """Blocking form of :meth:`list`; same arguments and errors."""
        found: Dict[str, Holder] = {}
        token: Optional[str] = None
        for _ in range(_core.KUBE_LIST_PAGES):
            call = self._list_call(prefix, limit, token)
            try:
                reply = str(self._execute_sync(call))
            except (ConfigError, BackendError):
                raise
            except Exception as exc:
                raise BackendError(f"list({prefix!r}) failed: {exc}") from exc
            token, holders = _core.read_kubernetes_list(prefix, reply)
            found.update((h["name"], Holder._from_core(h)) for h in holders)
            if token is None or len(found) >= limit:
                break
        return self._listed(found, limit)

    # -- what Redis-shaped helpers this backend does not have --

    def _no(self, what: str) -> ConfigError:
        return ConfigError(
            f"KubernetesLeaseBackend has no {what}: fence writes on your resource with the "
            "lease's token (leaseTransitions), e.g. fencepost.Fence or sql_fenced_update"
        )

    async def fenced_set(
        self,
        data_key: str,
        fence_key: str,
        token: int,
        value: Union[str, bytes],
        *,
        owner_id: Optional[str] = None,
    ) -> None:
        """Not available on Kubernetes: Leases hold no data to fence."""
        raise self._no("fenced_set")

    def fenced_set_sync(
        self,
        data_key: str,
        fence_key: str,
        token: int,
        value: Union[str, bytes],
        *,
        owner_id: Optional[str] = None,
    ) -> None:
        """Not available on Kubernetes: Leases hold no data to fence."""
        raise self._no("fenced_set_sync")

    async def is_locked(self, name: str) -> bool:
        """Not available: whether a Lease's holder has expired is judged by observing
        it for its duration (see the module docs); use :meth:`read_lease`."""
        raise self._no("is_locked")

    def is_locked_sync(self, name: str) -> bool:
        """Not available: see :meth:`is_locked`."""
        raise self._no("is_locked_sync")

    async def force_release(self, name: str) -> bool:
        """Not available on Kubernetes."""
        raise self._no("force_release")

    def force_release_sync(self, name: str) -> bool:
        """Not available on Kubernetes."""
        raise self._no("force_release_sync")

    def __repr__(self) -> str:
        kind = "asyncio" if self._is_async else "blocking"
        return f"<fencepost.kubernetes.KubernetesLeaseBackend {kind} server={self._server!r} namespace={self._namespace!r}>"
