//! Reference servers with injected time, for tests, simulation and the embedded
//! in-memory backend (the demo's default: no server needed).

mod redis;

pub use redis::MemoryRedis;
