//! The async driver on tokio: two tasks contend for one lock, each writing through a
//! fence with its token. The "server" is the in-memory Redis behind a 1 ms network;
//! with a real Redis, implement `Transport` with your client (run the command's script
//! with EVALSHA and turn the reply into `RedisValue`).
//!
//! usage: cargo run -p fencepost-core --features driver --example tokio_driver

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencepost_core::driver::{driver, Clock, Transport};
use fencepost_core::memory::MemoryRedis;
use fencepost_core::{Backend, Fence, Instant, LockOptions, Reply, Request};

/// Monotonic time from tokio's clock, in ns since the clock was made.
#[derive(Clone)]
struct TokioClock(tokio::time::Instant);

impl Clock for TokioClock {
    type Sleep = tokio::time::Sleep;
    fn now(&self) -> Instant {
        Instant::from_nanos(self.0.elapsed().as_nanos() as u64)
    }
    fn sleep_until(&self, at: Instant) -> Self::Sleep {
        tokio::time::sleep_until(self.0 + Duration::from_nanos(at.as_nanos()))
    }
}

/// The in-memory server, one millisecond away.
#[derive(Clone)]
struct Memory {
    server: Arc<Mutex<MemoryRedis>>,
    clock: TokioClock,
}

impl Transport for Memory {
    type Execute = Pin<Box<dyn Future<Output = Result<Reply, String>> + Send>>;
    fn execute(&self, request: &Request) -> Self::Execute {
        let (server, clock, body) = (
            self.server.clone(),
            self.clock.clone(),
            request.body.clone(),
        );
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let reply = server
                .lock()
                .map_err(|_| "server poisoned".to_owned())?
                .execute(clock.now(), &body);
            Ok(reply)
        })
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clock = TokioClock(tokio::time::Instant::now());
    let transport = Memory {
        server: Arc::new(Mutex::new(MemoryRedis::new())),
        clock: clock.clone(),
    };
    let (locks, run) = driver(Backend::default(), transport, clock)?;
    let driver_task = tokio::spawn(run);
    let fence = Arc::new(Mutex::new(Fence::new()));

    let mut workers = Vec::new();
    for worker in ["A", "B"] {
        let (locks, fence) = (locks.clone(), fence.clone());
        workers.push(tokio::spawn(async move {
            let options = LockOptions::ttl(Duration::from_secs(2));
            let lease = locks.acquire("report", options).await.expect("acquired");
            println!("{worker}: holding 'report' with fencing token {}", lease.token());
            tokio::select! {
                reason = lease.lost() => println!("{worker}: lost the lease: {reason:?}"),
                _ = tokio::time::sleep(Duration::from_millis(50)) => {
                    fence.lock().expect("fence").check("report", lease.token()).expect("fresh token");
                    println!("{worker}: wrote with token {}", lease.token());
                }
            }
            lease.release().await.expect("released");
        }));
    }
    for w in workers {
        w.await?;
    }
    drop(locks); // the driver's run future ends once every handle is gone
    driver_task.await?;
    println!("done");
    Ok(())
}
