"""The Kubernetes Lease adapter (httpx) against the project's Lease API server
(``tests/kube/lease_server.py``, started by scripts/services/kube-lease.sh; its URL in
``FENCEPOST_KUBE_URL`` and bearer token in ``FENCEPOST_KUBE_TOKEN``). No kube-apiserver
can run here: this server implements the Lease resource as the API documentation
describes it, and its controls (pause, hang PUTs, 409 storms, 5xx) stage the faults."""

from __future__ import annotations

import asyncio
import base64
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

import fencepost
import kube_contender

URL = os.environ.get("FENCEPOST_KUBE_URL")
TOKEN = os.environ.get("FENCEPOST_KUBE_TOKEN", "")
REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not URL, reason="FENCEPOST_KUBE_URL not set (scripts/test sets it)")
MICROTIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def api(method: str, path: str, body: Any = None, content_type: str = "application/json") -> Tuple[int, Any]:
    """A raw call to the test server, as another client (client-go, kubectl) makes it."""
    import httpx

    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": content_type}
    # the test server speaks plain HTTP: no CA file to load (loading the system's failed
    # with "PEM lib" in a teardown right after the TLS tests' refused handshakes)
    r = httpx.request(method, f"{URL}{path}", headers=headers,
                      content=None if body is None else json.dumps(body), timeout=5.0,
                      verify=str(URL).startswith("https://"))
    return r.status_code, r.json()


def control(what: str, **body: Any) -> None:
    code, doc = api("POST", f"/_control/{what}", body)
    assert code == 200, doc


def stored(name: str) -> Dict[str, Any]:
    code, doc = api("GET", f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{name}")
    assert code == 200, doc
    return dict(doc)


@pytest.fixture(autouse=True)
def clean_controls() -> Iterator[None]:
    yield
    control("pause", on=False)
    control("hang_puts", on=False)
    control("conflicts", count=0)
    control("errors", count=0)


@pytest.fixture
def kb() -> Iterator[Any]:
    b = kube_contender.backend(URL or "", TOKEN)
    yield b
    b.close()
    b.client.close()


def test_acquire_renew_release_write_every_lease_field_as_client_go_does(kb: Any) -> None:
    name = unique("fields")
    lock = fencepost.Lock(kb, name, ttl=3, purpose="correctness")
    with lock as lease:
        assert lease.token == 1
        first = stored(name)
        spec = first["spec"]
        assert spec["holderIdentity"] == lease.owner_id
        assert spec["leaseDurationSeconds"] == 3
        assert spec["leaseTransitions"] == 1
        assert MICROTIME.match(spec["acquireTime"]) and spec["renewTime"] == spec["acquireTime"]
        wall = time.time()
        acquired = time.mktime(time.strptime(spec["acquireTime"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        assert abs(acquired - wall) < 5
        time.sleep(1.3)  # one renewal (every ttl / 3)
        lease.check()
        renewed = stored(name)
        assert renewed["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
        assert renewed["spec"]["acquireTime"] == spec["acquireTime"]
        assert renewed["spec"]["renewTime"] > spec["renewTime"]
        assert renewed["spec"]["leaseTransitions"] == 1
        assert renewed["metadata"]["uid"] == first["metadata"]["uid"]
    # released as client-go's ReleaseOnCancel leaves it
    spec = stored(name)["spec"]
    assert spec["holderIdentity"] == ""
    assert spec["leaseDurationSeconds"] == 1
    assert spec["leaseTransitions"] == 1
    assert MICROTIME.match(spec["renewTime"])
    assert kb.read_lease_sync(name)["spec"] == spec
    assert kb.read_lease_sync(unique("absent")) is None


def test_tokens_rise_with_every_grant_including_a_retake_after_a_lapse(kb: Any) -> None:
    name = unique("tokens")
    tokens = []
    for _ in range(3):
        with fencepost.Lock(kb, name, ttl=1) as lease:
            tokens.append(lease.token)
    assert tokens == [1, 2, 3]
    # a lease left to lapse (no renewals): lost at its validity, and the cleanup sent
    # then clears the holder (owner-checked) with the count kept; the same lock takes
    # it again with the next token
    lock = fencepost.Lock(kb, name, ttl=1, auto_renew=False)
    lease = lock.acquire_sync()
    assert lease.token == 4
    assert lease.lost.wait(2.0)
    assert lease.lost_reason == "expired"
    for _ in range(100):
        if stored(name)["spec"]["holderIdentity"] == "":
            break
        time.sleep(0.01)
    assert stored(name)["spec"]["leaseTransitions"] == 4
    again = lock.acquire_sync()
    assert again.token == 5
    again.release()


async def test_asyncio_client_acquires_and_releases() -> None:
    b = kube_contender.backend(URL or "", TOKEN, use_async=True)
    name = unique("async")
    async with fencepost.Lock(b, name, ttl=2) as lease:
        assert lease.token == 1
        assert stored(name)["spec"]["holderIdentity"] == lease.owner_id
        assert (await b.read_lease(name))["spec"]["leaseTransitions"] == 1  # type: ignore[index]
    assert stored(name)["spec"]["holderIdentity"] == ""
    await b.aclose()
    await b.client.aclose()


def test_a_409_storm_delays_the_grant_and_renewals_ride_it_out(kb: Any) -> None:
    name = unique("storm")
    control("conflicts", count=15)
    start = time.monotonic()
    with fencepost.Lock(kb, name, ttl=3, acquire_timeout=20) as lease:
        assert lease.token == 1
        assert time.monotonic() - start < 20
        # a storm during renewals: each 409 re-reads the Lease, finds it still ours and
        # writes again (or retries later); the lease is kept
        control("conflicts", count=4)
        time.sleep(2.5)
        lease.check()
        assert stored(name)["spec"]["holderIdentity"] == lease.owner_id


def test_5xx_for_some_requests_is_retried(kb: Any) -> None:
    name = unique("errors")
    control("errors", count=3, code=503)
    with fencepost.Lock(kb, name, ttl=2, acquire_timeout=10) as lease:
        assert lease.token == 1
        control("errors", count=2, code=500)
        time.sleep(1.5)
        lease.check()


async def test_an_api_server_hanging_while_the_leader_renews_loses_the_lease_on_time() -> None:
    b = kube_contender.backend(URL or "", TOKEN, use_async=True, timeout=5.0)
    name = unique("hang")
    lock = fencepost.Lock(b, name, ttl=3)
    lease = await lock.acquire()
    deadline = lease.valid_until_ns
    control("hang_puts", on=True)  # every renewal hangs from now on
    await asyncio.sleep(0)
    start = time.monotonic_ns()
    with pytest.raises(fencepost.LockLost):
        while True:
            lease.check()
            await asyncio.sleep(0.01)
    lost_at = time.monotonic_ns()
    # lost at the validity of the last renewal that completed, never later (+ a poll)
    assert lease.valid_until_ns >= deadline
    assert lost_at <= lease.valid_until_ns + 150_000_000, (lost_at - lease.valid_until_ns) / 1e6
    assert lost_at - start < 3.2e9
    assert lease.lost_reason == "expired"
    control("hang_puts", on=False)
    await b.aclose()
    await b.client.aclose()


def test_a_paused_api_server_times_the_acquire_out(kb: Any) -> None:
    control("pause", on=True)  # every request hangs
    start = time.monotonic()
    with pytest.raises(fencepost.AcquireTimeout):
        fencepost.Lock(kb, unique("paused"), ttl=2, acquire_timeout=1.0).acquire_sync()
    assert time.monotonic() - start < 3.0
    control("pause", on=False)


def test_a_deleted_lease_is_lost_at_the_next_renewal_and_never_recreated(kb: Any) -> None:
    name = unique("deleted")
    with pytest.raises(fencepost.LockLost) as e:
        with fencepost.Lock(kb, name, ttl=3) as lease:
            code, doc = api("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{name}")
            assert (code, doc["status"]) == (200, "Success")
            assert lease.lost.wait(2.0)  # the renewal (every 1 s) finds it gone: 404
    assert e.value.reason == "renew_rejected"
    code, doc = api("GET", f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{name}")
    assert (code, doc["reason"]) == (404, "NotFound")  # a renewal never creates it


def crashed_holder(name: str, ttl: int) -> float:
    """A process takes lock ``name`` with ``ttl`` and is killed (SIGKILL) while it holds:
    its Lease stays, naming it. Returns when it was killed (monotonic seconds)."""
    ctx = multiprocessing.get_context("spawn")
    held = ctx.Event()
    p = ctx.Process(target=kube_contender.hold, args=(URL, TOKEN, name, ttl, held))
    p.start()
    assert held.wait(30)
    os.kill(p.pid, signal.SIGKILL)
    killed = time.monotonic()
    p.join(10)
    return killed


def test_two_candidates_with_different_lease_durations_wait_for_the_record_s_own(kb: Any) -> None:
    # a holder with a 6 s lease crashes: the 2 s candidate waits the 6 s the record
    # states, from its first observation (not its own 2 s)
    name = unique("durations")
    crashed_holder(name, 6)
    start = time.monotonic()
    with fencepost.Lock(kb, name, ttl=2, acquire_timeout=15) as lease:
        waited = time.monotonic() - start
        assert 6.0 <= waited < 8.0, waited
        assert lease.token == 2
    # the other way round: a 2 s holder crashes, the 6 s candidate takes over after 2 s
    name = unique("durations")
    crashed_holder(name, 2)
    start = time.monotonic()
    with fencepost.Lock(kb, name, ttl=6, acquire_timeout=15) as lease:
        waited = time.monotonic() - start
        assert 2.0 <= waited < 4.0, waited
        assert lease.token == 2
        assert stored(name)["spec"]["leaseDurationSeconds"] == 6


def test_a_lease_written_as_client_go_writes_it_is_honoured_and_vice_versa(kb: Any) -> None:
    name = unique("clientgo")
    path = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
    now = "2026-12-01T10:00:00.000000Z"
    # a client-go elector's first acquire: LeaderTransitions 0, its identity, 2 s
    code, doc = api("POST", path, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 2, "acquireTime": now,
                 "renewTime": now, "leaseTransitions": 0}})
    assert code == 201, doc
    start = time.monotonic()
    with fencepost.Lock(kb, name, ttl=3, acquire_timeout=10) as lease:
        # not before the record stood unchanged for its 2 s; client-go's count + 1
        assert time.monotonic() - start >= 2.0
        assert lease.token == 1
        # a client-go candidate watching: the record changes within its duration
        # (renewTime every ttl / 3), so it never judges it expired
        seen = stored(name)
        time.sleep(1.2)
        assert stored(name)["metadata"]["resourceVersion"] != seen["metadata"]["resourceVersion"]
        # a client-go update with a stale resourceVersion is refused with 409
        stale = dict(seen, spec=dict(seen["spec"], holderIdentity="pod-b"))
        code, doc = api("PUT", f"{path}/{name}", stale)
        assert (code, doc["reason"]) == (409, "Conflict")
    # released: client-go's tryAcquireOrRenew takes a lease with no holder at once, with
    # LeaderTransitions + 1 (the holder changes)
    rec = stored(name)
    assert rec["spec"]["holderIdentity"] == ""
    took = dict(rec, spec={"holderIdentity": "pod-b", "leaseDurationSeconds": 2, "acquireTime": now,
                           "renewTime": now, "leaseTransitions": rec["spec"]["leaseTransitions"] + 1})
    code, doc = api("PUT", f"{path}/{name}", took)
    assert code == 200, doc
    # and fencepost honours pod-b's lease until it stood unchanged for 2 s
    start = time.monotonic()
    with fencepost.Lock(kb, name, ttl=3, acquire_timeout=10) as lease:
        assert time.monotonic() - start >= 2.0
        assert lease.token == 3


def test_eight_processes_with_a_fenced_log_hold_one_at_a_time_and_log_tokens_in_order(tmp_path: Path) -> None:
    name, log = unique("eight"), str(tmp_path / "fenced.log")
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    rounds = 4
    procs = [
        ctx.Process(target=kube_contender.run, args=(URL, TOKEN, name, log, rounds, go, out, i % 2 == 1))
        for i in range(8)
    ]
    for p in procs:
        p.start()
    go.set()
    spans = [out.get(timeout=120) for _ in range(8 * rounds)]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    spans.sort()
    for a, b in zip(spans, spans[1:]):
        assert a[1] <= b[0], f"critical sections overlap: {a} and {b}"
    # tokens strictly rise in grant order, one per grant, and the log holds them in order
    assert [s[2] for s in spans] == list(range(1, 8 * rounds + 1))
    assert [e[0] for e in kube_contender.read_log(log)] == list(range(1, 8 * rounds + 1))


def test_a_holder_stopped_past_its_lease_is_replaced_and_its_fenced_write_refused(tmp_path: Path, kb: Any) -> None:
    name, log = unique("stopped"), str(tmp_path / "fenced.log")
    ctx = multiprocessing.get_context("spawn")
    held, out = ctx.Event(), ctx.Queue()
    p = ctx.Process(target=kube_contender.hold_then_write, args=(URL, TOKEN, name, log, held, out))
    p.start()
    try:
        assert held.wait(30)
        os.kill(p.pid, signal.SIGSTOP)  # a GC pause, a frozen VM
        start = time.monotonic()
        lease = fencepost.Lock(kb, name, ttl=2, acquire_timeout=15, purpose="correctness").acquire_sync()
        assert time.monotonic() - start >= 2.0  # the old record's 2 s, observed
        assert kube_contender.fenced_append(log, lease.token, lease.owner_id, "new holder")
        os.kill(p.pid, signal.SIGCONT)
        lost, refused, old_token = out.get(timeout=30)
        assert lost and refused
        assert lease.token == old_token + 1
        lease.release()
    finally:
        os.kill(p.pid, signal.SIGCONT)
        p.join(30)
    assert [e[2] for e in kube_contender.read_log(log)] == ["first", "new holder"]


def test_bad_names_and_ttls_are_refused_when_the_lock_is_built(kb: Any) -> None:
    with pytest.raises(fencepost.ConfigError, match="DNS-1123 subdomain") as e:
        fencepost.Lock(kb, "Report_1", ttl=3)
    assert e.value.option == "name"
    with pytest.raises(fencepost.ConfigError, match="whole seconds") as e:
        fencepost.Lock(kb, "report", ttl=1.5)
    assert e.value.option == "ttl"
    bad = kube_contender.backend(URL or "", TOKEN)
    bad._namespace = "Kube_System"
    with pytest.raises(fencepost.ConfigError, match="DNS-1123 label"):
        fencepost.Lock(bad, "report", ttl=3)
    bad.client.close()


def test_a_wrong_token_fails_the_acquire_as_a_protocol_error() -> None:
    b = kube_contender.backend(URL or "", "not-the-token")
    with pytest.raises(fencepost.ProtocolError, match="401 Unauthorized"):
        fencepost.Lock(b, unique("auth"), ttl=2, acquire_timeout=2).acquire_sync()
    b.close()
    b.client.close()


# ---- configuration: kubeconfig and in-cluster, over TLS --------------------------------


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tuple[str, Path]]:
    """A second Lease API server of the project's, over TLS with a self-signed
    certificate for 127.0.0.1 (made with openssl), stopped by its PID."""
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
        check=True, capture_output=True,
    )
    url_file = d / "url"
    p = subprocess.Popen(
        [sys.executable, str(REPO / "tests/kube/lease_server.py"), "--token", "tls-token", "--url-file",
         str(url_file), "--tls-cert", str(d / "cert.pem"), "--tls-key", str(d / "key.pem"),
         "--tls-client-ca", str(d / "cert.pem")],
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            if url_file.exists():
                break
            time.sleep(0.05)
        yield url_file.read_text().strip(), d
    finally:
        p.terminate()
        p.wait(10)


def test_from_kubeconfig_reads_the_current_context_s_server_ca_and_token(tls_server: Tuple[str, Path]) -> None:
    url, d = tls_server
    ca = base64.b64encode((d / "cert.pem").read_bytes()).decode()
    (d / "token").write_text("tls-token\n")
    config = d / "config"
    # JSON is YAML: the shape `kubectl config view --raw` writes
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "c", "cluster": {"server": url, "certificate-authority-data": ca}},
                     {"name": "other", "cluster": {"server": "https://10.0.0.1"}}],
        "users": [{"name": "u", "user": {"tokenFile": "token"}}],
        "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u", "namespace": "apps"}}],
    }))
    b = fencepost.kubernetes.KubernetesLeaseBackend.from_kubeconfig(str(config))
    assert (b.server, b.namespace) == (url, "apps")
    with fencepost.Lock(b, "leader", ttl=2) as lease:
        assert lease.token == 1
    assert b.read_lease_sync("leader")["metadata"]["namespace"] == "apps"  # type: ignore[index]
    b.close()
    # a missing context, an exec plugin: ConfigError naming them
    with pytest.raises(fencepost.ConfigError, match="no context named 'nope'"):
        fencepost.kubernetes.KubernetesLeaseBackend.from_kubeconfig(str(config), context="nope")
    doc = json.loads(config.read_text())
    doc["users"][0]["user"] = {"exec": {"command": "aws"}}
    config.write_text(json.dumps(doc))
    with pytest.raises(fencepost.ConfigError, match="'exec'"):
        fencepost.kubernetes.KubernetesLeaseBackend.from_kubeconfig(str(config))


def test_from_kubeconfig_authenticates_with_a_client_certificate(tls_server: Tuple[str, Path]) -> None:
    url, d = tls_server
    b64 = lambda p: base64.b64encode(p.read_bytes()).decode()  # noqa: E731
    config = d / "config-cert.yaml"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: cert\n"
        f"clusters:\n- name: c\n  cluster:\n    server: {url}\n    certificate-authority: cert.pem\n"
        f"users:\n- name: u\n  user:\n    client-certificate-data: {b64(d / 'cert.pem')}\n"
        f"    client-key-data: {b64(d / 'key.pem')}\n"
        "contexts:\n- name: cert\n  context:\n    cluster: c\n    user: u\n"
    )
    b = fencepost.kubernetes.KubernetesLeaseBackend.from_kubeconfig(str(config))
    with fencepost.Lock(b, "by-cert", ttl=2) as lease:
        assert lease.token == 1
    b.close()
    # without the certificate (and no token) the server refuses: 401
    config.write_text(config.read_text().split("users:")[0] + "users:\n- name: u\n  user: {}\n"
                      "contexts:\n- name: cert\n  context:\n    cluster: c\n    user: u\n")
    b = fencepost.kubernetes.KubernetesLeaseBackend.from_kubeconfig(str(config))
    with pytest.raises(fencepost.ProtocolError, match="401"):
        fencepost.Lock(b, "by-cert", ttl=2, acquire_timeout=2).acquire_sync()
    b.close()


async def test_in_cluster_uses_the_service_account_token_ca_and_namespace(tls_server: Tuple[str, Path]) -> None:
    url, d = tls_server
    sa = d / "serviceaccount"
    sa.mkdir(exist_ok=True)
    (sa / "token").write_text("tls-token")
    (sa / "ca.crt").write_bytes((d / "cert.pem").read_bytes())
    (sa / "namespace").write_text("kube-system\n")
    port = url.rsplit(":", 1)[1]
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}
    b = fencepost.kubernetes.KubernetesLeaseBackend.in_cluster(
        asyncio=True, service_account_dir=str(sa), environ=env)
    assert b.namespace == "kube-system"
    async with fencepost.Lock(b, "controller", ttl=2) as lease:
        assert lease.token == 1
    await b.aclose()
    with pytest.raises(fencepost.ConfigError, match="KUBERNETES_SERVICE_HOST"):
        fencepost.kubernetes.KubernetesLeaseBackend.in_cluster(environ={})
