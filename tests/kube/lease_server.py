"""A small Kubernetes API server for tests: the ``coordination.k8s.io/v1`` Lease
resource, nothing else. No kube-apiserver can be installed on the machines this
project is tested on, so the Kubernetes Lease backend is tested against this server,
not a real cluster.

Usage: ``python3 tests/kube/lease_server.py [--port 0] [--token T] [--url-file F]
[--tls-cert C --tls-key K]`` — listens on 127.0.0.1 only and prints its URL.

What it implements, each tied to the Kubernetes API documentation:

* API conventions (https://github.com/kubernetes/community/blob/master/contributors/devel/sig-architecture/api-conventions.md):
  "Concurrency Control and Consistency", "HTTP Status codes", "Response Status Kind";
* the Status reasons and their codes (https://pkg.go.dev/k8s.io/apimachinery/pkg/apis/meta/v1#StatusReason);
* the Lease type and its validation (https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/lease-v1/);
* list chunking: ``?limit=N`` answers at most N items sorted by name with an opaque
  ``metadata.continue`` token when more remain, ``?continue=`` resumes after it
  ("Retrieving large results sets in chunks", https://kubernetes.io/docs/reference/using-api/api-concepts/).

Test controls (not Kubernetes API; JSON bodies, same bearer token) under ``/_control/``:
``POST /_control/pause {"on": bool}`` holds every API request until turned off (then
they are served, as a request stuck in a real server may still be applied);
``POST /_control/hang_puts {"on": bool}`` does the same to PUTs only;
``POST /_control/conflicts {"count": N}`` answers the next N writes (POST, PUT, PATCH,
DELETE) with 409 Conflict as if another writer had won; ``POST /_control/errors
{"count": N, "code": 503}`` answers the next N API requests with that 5xx Status;
``--tls-client-ca`` makes it accept client certificates (a verified one
authenticates without the token). ``POST /_control/reset`` forgets every Lease and control; ``GET /_control/state``
returns every stored Lease and the request counts.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import re
import ssl
import sys
import threading
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple

GROUP = "coordination.k8s.io"
PREFIX = "/apis/coordination.k8s.io/v1/namespaces/"

# DNS-1123 (api-conventions "Naming conventions"; Lease names are subdomains,
# namespaces labels)
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
LABEL = re.compile(rf"^{_LABEL}$")
# MicroTime: RFC 3339 with microseconds (metav1.RFC3339Micro); Go's parser also takes
# fewer fractional digits and an offset, so this does too
MICROTIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$")


class ApiError(Exception):
    """A failure the server answers with a ``Status`` document ("Response Status Kind":
    kind Status, status Failure, a machine-readable reason, the HTTP code repeated in
    ``code``, and details naming the object)."""

    def __init__(self, code: int, reason: str, message: str, name: str = "",
                 kind: str = "leases", causes: Optional[List[Dict[str, str]]] = None) -> None:
        super().__init__(message)
        details: Dict[str, Any] = {}
        if name:
            details = {"name": name, "group": GROUP, "kind": kind}
        if causes:
            details["causes"] = causes
        self.code = code
        self.body = {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "details": details, "code": code,
        }


def not_found(name: str) -> ApiError:
    # StatusReasonNotFound, 404: "the resource you requested does not exist"
    return ApiError(404, "NotFound", f'leases.{GROUP} "{name}" not found', name)


def conflict(name: str) -> ApiError:
    # StatusReasonConflict, 409, the message of an update whose resourceVersion is not
    # the stored one ("Concurrency Control and Consistency": "the server will reject
    # the update with a 409 Conflict if the resourceVersion ... does not match")
    return ApiError(
        409, "Conflict",
        f'Operation cannot be fulfilled on leases.{GROUP} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again", name)


def invalid(name: str, field: str, value: Any, detail: str) -> ApiError:
    # StatusReasonInvalid, 422: "invalid data provided as part of the request", with one
    # StatusCause per field
    message = f"{field}: Invalid value: {json.dumps(value)}: {detail}"
    return ApiError(422, "Invalid", f'Lease.{GROUP} "{name}" is invalid: {message}', name,
                    kind="Lease",
                    causes=[{"reason": "FieldValueInvalid", "message": f"Invalid value: "
                             f"{json.dumps(value)}: {detail}", "field": field}])


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    """The Leases, one global resourceVersion counter (etcd's revision in a real
    server: "resourceVersion ... is opaque to clients", a string), and the test
    controls."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.leases: Dict[Tuple[str, str], Dict[str, Any]] = {}
        self.revision = 0
        self.paused = False
        self.hang_puts = False
        self.conflicts = 0
        self.errors = 0
        self.error_code = 503
        self.counts: Dict[str, int] = {}

    def reset(self) -> None:
        with self.lock:
            self.leases.clear()
            self.paused = self.hang_puts = False
            self.conflicts = self.errors = 0
            self.counts.clear()
            self.lock.notify_all()

    def _validate(self, ns: str, name: str, obj: Any) -> Dict[str, Any]:
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", "the body of the request was not a Lease")
        if obj.get("kind", "Lease") != "Lease" or obj.get("apiVersion", f"{GROUP}/v1") != f"{GROUP}/v1":
            raise ApiError(400, "BadRequest", f"the object is not a {GROUP}/v1 Lease")
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            raise invalid(name, "metadata.name", None, "name or generateName is required")
        if meta.get("namespace", ns) != ns:
            # the apiserver refuses a body whose namespace differs from the URL's
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not "
                           "match the namespace sent on the request")
        if not isinstance(meta.get("name"), str) or not SUBDOMAIN.match(meta["name"]) \
                or len(meta["name"]) > 253:
            raise invalid(name, "metadata.name", meta.get("name"),
                          "a lowercase RFC 1123 subdomain must consist of lower case "
                          "alphanumeric characters, '-' or '.', and must start and end "
                          "with an alphanumeric character")
        spec = obj.get("spec") or {}
        if not isinstance(spec, dict):
            raise ApiError(400, "BadRequest", "spec must be an object")
        # the Lease validation: durations and transitions are int32, the duration
        # positive, the transitions non-negative; times are MicroTime
        d = spec.get("leaseDurationSeconds")
        if d is not None and (not isinstance(d, int) or isinstance(d, bool) or d <= 0 or d >= 2**31):
            raise invalid(name, "spec.leaseDurationSeconds", d, "must be greater than 0")
        t = spec.get("leaseTransitions")
        if t is not None and (not isinstance(t, int) or isinstance(t, bool) or t < 0 or t >= 2**31):
            raise invalid(name, "spec.leaseTransitions", t, "must be greater than or equal to 0")
        h = spec.get("holderIdentity")
        if h is not None and not isinstance(h, str):
            raise ApiError(400, "BadRequest", "spec.holderIdentity must be a string")
        for f in ("acquireTime", "renewTime"):
            v = spec.get(f)
            if v is not None and (not isinstance(v, str) or not MICROTIME.match(v)):
                raise ApiError(400, "BadRequest", f"spec.{f}: parsing time {json.dumps(v)} as "
                               "RFC 3339 failed")
        return obj

    def _stored(self, ns: str, obj: Dict[str, Any], old: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        self.revision += 1
        meta = dict(obj["metadata"])
        meta["namespace"] = ns
        meta["resourceVersion"] = str(self.revision)
        meta["uid"] = old["metadata"]["uid"] if old else str(uuid.uuid4())
        meta["creationTimestamp"] = old["metadata"]["creationTimestamp"] if old else now_rfc3339()
        stored = {"kind": "Lease", "apiVersion": f"{GROUP}/v1", "metadata": meta,
                  "spec": dict(obj.get("spec") or {})}
        self.leases[(ns, meta["name"])] = stored
        return stored

    def _list(self, ns: str, query: Dict[str, str]) -> Dict[str, Any]:
        items = [v for (n, _), v in sorted(self.leases.items()) if n == ns]
        after = query.get("continue")
        if after:
            try:
                last = base64.urlsafe_b64decode(after.encode()).decode()
            except ValueError:
                raise ApiError(400, "BadRequest", "invalid continue token") from None
            items = [v for v in items if v["metadata"]["name"] > last]
        meta: Dict[str, Any] = {"resourceVersion": str(self.revision)}
        limit = int(query.get("limit") or 0)
        if 0 < limit < len(items):
            items = items[:limit]
            meta["continue"] = base64.urlsafe_b64encode(
                items[-1]["metadata"]["name"].encode()).decode()
        return {"kind": "LeaseList", "apiVersion": f"{GROUP}/v1", "metadata": meta, "items": items}

    def _injected(self, method: str, name: str) -> None:
        if self.errors > 0:
            self.errors -= 1
            code = self.error_code
            reason = {500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}.get(code, "InternalError")
            raise ApiError(code, reason, f"injected {code} by the test server")
        if method != "GET" and self.conflicts > 0:
            self.conflicts -= 1
            raise conflict(name)

    def handle(self, method: str, ns: str, name: Optional[str], body: Any,
               content_type: str, query: Optional[Dict[str, str]] = None) -> Tuple[int, Dict[str, Any]]:
        with self.lock:
            while self.paused or (method == "PUT" and self.hang_puts):
                self.lock.wait()
            self.counts[method] = self.counts.get(method, 0) + 1
            if not LABEL.match(ns):
                raise ApiError(400, "BadRequest", f"invalid namespace {ns!r}")
            self._injected(method, name or "")
            if name is None:
                if method == "GET":
                    return 200, self._list(ns, query or {})
                if method != "POST":
                    raise ApiError(405, "MethodNotAllowed",
                                   "the server does not allow this method on the requested resource")
                obj = self._validate(ns, "", body)
                key = (ns, obj["metadata"]["name"])
                if key in self.leases:
                    # StatusReasonAlreadyExists, 409
                    raise ApiError(409, "AlreadyExists",
                                   f'leases.{GROUP} "{key[1]}" already exists', key[1])
                if obj["metadata"].get("resourceVersion"):
                    raise ApiError(400, "BadRequest",
                                   "resourceVersion should not be set on objects to be created")
                return 201, self._stored(ns, obj, None)
            old = self.leases.get((ns, name))
            if method == "GET":
                if old is None:
                    raise not_found(name)
                return 200, old
            if method == "PUT":
                obj = self._validate(ns, name, body)
                if obj["metadata"]["name"] != name:
                    raise ApiError(400, "BadRequest", f"the name of the object "
                                   f"({obj['metadata']['name']}) does not match the name on "
                                   f"the URL ({name})")
                if old is None:
                    # Leases are not created by an update
                    raise not_found(name)
                rv = obj["metadata"].get("resourceVersion")
                # an update carrying a resourceVersion is a compare-and-set; one without
                # is unconditional (Leases allow unconditional updates)
                if rv and rv != old["metadata"]["resourceVersion"]:
                    raise conflict(name)
                return 200, self._stored(ns, obj, old)
            if method == "PATCH":
                if old is None:
                    raise not_found(name)
                if content_type != "application/json-patch+json":
                    raise ApiError(415, "UnsupportedMediaType",
                                   f"the body of the request was in an unknown format: {content_type}")
                patched = apply_json_patch(old, body, name)
                obj = self._validate(ns, name, patched)
                return 200, self._stored(ns, obj, old)
            if method == "DELETE":
                if old is None:
                    raise not_found(name)
                pre = (body or {}).get("preconditions") or {} if isinstance(body, dict) else {}
                if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
                    raise conflict(name)
                self.revision += 1
                del self.leases[(ns, name)]
                return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                             "status": "Success",
                             "details": {"name": name, "group": GROUP, "kind": "leases",
                                         "uid": old["metadata"]["uid"]}}
            raise ApiError(405, "MethodNotAllowed",
                           "the server does not allow this method on the requested resource")


def _pointer(doc: Any, path: str) -> Tuple[Any, str]:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]
    if not path.startswith("/") or not parts:
        raise KeyError(path)
    for p in parts[:-1]:
        doc = doc[int(p)] if isinstance(doc, list) else doc[p]
    return doc, parts[-1]


def apply_json_patch(obj: Dict[str, Any], patch: Any, name: str) -> Dict[str, Any]:
    """RFC 6902 ``test``, ``replace``, ``add`` and ``remove`` on object members. A
    failed ``test`` (or a missing path) leaves the object unchanged and answers 422
    Invalid, as the apiserver answers a JSON Patch it cannot apply."""
    doc = json.loads(json.dumps(obj))
    if not isinstance(patch, list):
        raise ApiError(400, "BadRequest", "a JSON Patch must be a list of operations")
    for op in patch:
        try:
            parent, key = _pointer(doc, op["path"])
            kind = op["op"]
            if kind == "test":
                if parent.get(key, object()) != op["value"]:
                    raise ApiError(422, "Invalid",
                                   f"the server rejected our request due to an error in our "
                                   f"request: testing value {op['path']} failed: test failed")
            elif kind in ("replace", "remove") and key not in parent:
                raise KeyError(op["path"])
            elif kind in ("replace", "add"):
                parent[key] = op["value"]
            elif kind == "remove":
                del parent[key]
            else:
                raise ApiError(422, "Invalid", f"unsupported JSON Patch operation {kind!r}")
        except (KeyError, TypeError, IndexError, ValueError, AttributeError) as exc:
            raise ApiError(422, "Invalid", f"the server rejected our request due to an error "
                           f"in our request: {exc}") from None
    return doc


class Handler(BaseHTTPRequestHandler):
    server: "LeaseServer"
    protocol_version = "HTTP/1.1"
    # headers and body go out in two writes: without TCP_NODELAY the body waits for
    # the client's delayed ACK of the headers (about 40 ms a response on Linux)
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet unless asked
        if self.server.verbose:
            super().log_message(format, *args)

    def _send(self, code: int, doc: Any) -> None:
        data = json.dumps(doc).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a request held past its deadline)

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ApiError(400, "BadRequest", "the body of the request could not be decoded as JSON") from None

    def _serve(self, method: str) -> None:
        try:
            body = self._body()
            token = self.server.token
            # a client certificate the TLS layer verified authenticates the request, as
            # the apiserver's x509 authenticator does
            by_cert = bool(getattr(self.connection, "getpeercert", lambda: None)())
            if token and not by_cert and self.headers.get("Authorization") != f"Bearer {token}":
                # StatusReasonUnauthorized, 401
                raise ApiError(401, "Unauthorized", "Unauthorized")
            path, _, qs = self.path.partition("?")
            query = dict(urllib.parse.parse_qsl(qs))
            if path.startswith("/_control/"):
                return self._send(200, self.server.control(method, path[len("/_control/"):], body))
            if not path.startswith(PREFIX):
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            rest = path[len(PREFIX):].split("/")
            if len(rest) == 2 and rest[1] == "leases":
                ns, name = rest[0], None
            elif len(rest) == 3 and rest[1] == "leases" and rest[2]:
                ns, name = rest[0], rest[2]
            else:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            code, doc = self.server.store.handle(method, ns, name, body, ctype, query)
            self._send(code, doc)
        except ApiError as e:
            self._send(e.code, e.body)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")


class LeaseServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int = 0, token: Optional[str] = None, verbose: bool = False) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.store = Store()
        self.token = token
        self.verbose = verbose

    def control(self, method: str, what: str, body: Any) -> Dict[str, Any]:
        s = self.store
        body = body if isinstance(body, dict) else {}
        with s.lock:
            if what == "state":
                return {"leases": [v for _, v in sorted(s.leases.items())], "counts": dict(s.counts),
                        "revision": s.revision}
            if method != "POST":
                raise ApiError(405, "MethodNotAllowed", "controls are POSTed")
            if what == "pause":
                s.paused = bool(body.get("on"))
            elif what == "hang_puts":
                s.hang_puts = bool(body.get("on"))
            elif what == "conflicts":
                s.conflicts = int(body.get("count", 0))
            elif what == "errors":
                s.errors = int(body.get("count", 0))
                s.error_code = int(body.get("code", 503))
            elif what == "reset":
                pass
            else:
                raise ApiError(404, "NotFound", f"no control {what!r}")
            s.lock.notify_all()
        if what == "reset":
            s.reset()
        return {"ok": True}


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--token", help="the bearer token every request must carry")
    p.add_argument("--url-file", help="write the URL here once listening")
    p.add_argument("--tls-cert")
    p.add_argument("--tls-key")
    p.add_argument("--tls-client-ca", help="accept client certificates signed by this CA")
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args(argv)
    server = LeaseServer(a.port, a.token, a.verbose)
    scheme = "http"
    if a.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls_cert, a.tls_key)
        if a.tls_client_ca:
            ctx.verify_mode = ssl.CERT_OPTIONAL
            ctx.load_verify_locations(a.tls_client_ca)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    if a.url_file:
        with open(a.url_file + ".tmp", "w") as f:
            f.write(url + "\n")
        import os
        os.replace(a.url_file + ".tmp", a.url_file)
    print(url, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        sys.stdout.flush()


if __name__ == "__main__":
    main()
