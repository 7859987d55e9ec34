# workerd config for worker.mjs: `workerd serve examples/workerd/config.capnp
# --socket-addr http=127.0.0.1:PORT` with UPSTASH_REDIS_REST_URL, UPSTASH_REDIS_REST_TOKEN
# and ETCD_ENDPOINTS (comma-separated) in the environment; scripts/workerd-example sets
# them and starts what they point at. The package's files are embedded from
# bindings-wasm/ (build it first: npm run build there); the module named "fencepost-wasm"
# is its workerd entry, which is what a bundler's `workerd` export condition picks.
using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "main", worker = .worker),
    # the REST endpoint and etcd are on loopback: workerd's default outbound reaches public
    # addresses only
    (name = "loopback", network = (allow = ["local"])),
  ],
  sockets = [ (name = "http", address = "127.0.0.1:8787", http = (), service = "main") ],
);

const worker :Workerd.Worker = (
  modules = [
    (name = "worker.mjs", esModule = embed "worker.mjs"),
    (name = "fencepost-wasm", esModule = embed "../../bindings-wasm/workerd.mjs"),
    # what the entry imports, under the names its relative imports resolve to
    (name = "web.mjs", esModule = embed "../../bindings-wasm/web.mjs"),
    (name = "dist/web/fencepost_wasm.js", esModule = embed "../../bindings-wasm/dist/web/fencepost_wasm.js"),
    (name = "dist/web/fencepost_api.mjs", esModule = embed "../../bindings-wasm/dist/web/fencepost_api.mjs"),
    (name = "dist/web/fencepost_wasm_bg.wasm", wasm = embed "../../bindings-wasm/dist/web/fencepost_wasm_bg.wasm"),
  ],
  compatibilityDate = "2025-09-01",
  globalOutbound = "loopback",
  bindings = [
    (name = "UPSTASH_REDIS_REST_URL", fromEnvironment = "UPSTASH_REDIS_REST_URL"),
    (name = "UPSTASH_REDIS_REST_TOKEN", fromEnvironment = "UPSTASH_REDIS_REST_TOKEN"),
    (name = "ETCD_ENDPOINTS", fromEnvironment = "ETCD_ENDPOINTS"),
  ],
);
