//! Every delay the machine chooses before trying again, one documented formula each.
//!
//! | delay | formula | used when |
//! | --- | --- | --- |
//! | [`acquire_backoff`] | full jitter over `min(retry_max, retry_base · 2^attempt, holder's remaining TTL)` | an acquire attempt did not get the lock |
//! | [`park_timeout`] | equal jitter over `min(retry_max, holder's remaining TTL)` | a queued waiter parks on a wake-up that hands the lock over |
//! | [`renew_retry`] | `max(renew_interval / 4, 1 ms)` | a renewal failed transiently (the validity deadline still decides loss) |
//! | [`release_retry`] | full jitter over `min(retry_max, retry_base · 2^attempt)` | a release failed in transport |
//! | cleanup retry | none: resent at once, at most [`RELEASE_ATTEMPTS`] sends, each within one TTL of its send | a cleanup release failed (it has no state of its own to wait in, and after a TTL the server has dropped the key anyway) |
//!
//! Full jitter draws uniformly from `0 ..= cap`; equal jitter from `cap/2 ..= cap`
//! (the AWS architecture blog's "Exponential Backoff and Jitter"). Callers clamp the
//! result to the acquire deadline where there is one.

use core::time::Duration;

use crate::options::LockOptions;

/// How many times a release (or a cleanup release) is sent before it is given up as
/// unconfirmed.
pub(crate) const RELEASE_ATTEMPTS: u32 = 3;

/// A source of uniform draws: `draw(max)` returns a duration in `0 ..= max`.
pub(crate) trait Jitter {
    fn draw(&mut self, max: Duration) -> Duration;
}

/// `min(retry_max, retry_base · 2^attempt)`; the exponent saturates at 2^20.
fn exponential_step(options: &LockOptions, attempt: u32) -> Duration {
    options
        .retry_base
        .saturating_mul(1u32 << attempt.min(20))
        .min(options.retry_max)
}

/// The wait before acquire attempt number `attempt + 1`: full jitter over
/// `min(retry_max, retry_base · 2^attempt)`, and below the holder's remaining TTL when
/// the server told it (waiting longer is pointless; jitter below it so contenders told
/// the same TTL still spread out).
pub(crate) fn acquire_backoff(
    options: &LockOptions,
    attempt: u32,
    holder_remaining: Option<Duration>,
    jitter: &mut impl Jitter,
) -> Duration {
    let step = exponential_step(options, attempt);
    jitter.draw(holder_remaining.map_or(step, |r| step.min(r)))
}

/// How long a waiter queued on the server parks on its wake-up. The releasing holder
/// wakes it (and hands it the lock), so this is only the fallback for a missed wake-up
/// and need not start short like a polling backoff: `retry_max`, or the holder's
/// remaining TTL when that is shorter (a holder that dies wakes nobody), with equal
/// jitter so waiters told the same TTL spread out.
pub(crate) fn park_timeout(
    options: &LockOptions,
    holder_remaining: Option<Duration>,
    jitter: &mut impl Jitter,
) -> Duration {
    let cap = holder_remaining.map_or(options.retry_max, |r| options.retry_max.min(r));
    let half = cap / 2;
    half + jitter.draw(cap - half)
}

/// The wait before retrying a renewal that failed transiently: a quarter of the renew
/// interval (at least 1 ms), so a short outage costs a few retries before the validity
/// deadline, which alone decides loss.
pub(crate) fn renew_retry(options: &LockOptions) -> Duration {
    (options.renew_interval() / 4).max(Duration::from_millis(1))
}

/// The wait before release attempt number `attempt` (1 or 2): full jitter over
/// `min(retry_max, retry_base · 2^attempt)`.
pub(crate) fn release_retry(
    options: &LockOptions,
    attempt: u32,
    jitter: &mut impl Jitter,
) -> Duration {
    jitter.draw(exponential_step(options, attempt))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Always the largest value allowed, so the caps show.
    struct Max;
    impl Jitter for Max {
        fn draw(&mut self, max: Duration) -> Duration {
            max
        }
    }

    /// Always zero, so the fixed parts show.
    struct Min;
    impl Jitter for Min {
        fn draw(&mut self, _: Duration) -> Duration {
            Duration::ZERO
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn options() -> LockOptions {
        let mut o = LockOptions::ttl(ms(1_200));
        o.retry_base = ms(10);
        o.retry_max = ms(500);
        o
    }

    #[test]
    fn acquire_backoff_doubles_up_to_retry_max_and_the_holders_ttl() {
        let o = options();
        // 10 · 2^0, 10 · 2^3, then capped: 10 · 2^6 = 640 > 500
        assert_eq!(acquire_backoff(&o, 0, None, &mut Max), ms(10));
        assert_eq!(acquire_backoff(&o, 3, None, &mut Max), ms(80));
        assert_eq!(acquire_backoff(&o, 6, None, &mut Max), ms(500));
        assert_eq!(acquire_backoff(&o, 1_000, None, &mut Max), ms(500));
        // the holder expires in 30 ms: waiting longer is pointless
        assert_eq!(acquire_backoff(&o, 6, Some(ms(30)), &mut Max), ms(30));
        assert_eq!(acquire_backoff(&o, 6, None, &mut Min), ms(0));
    }

    #[test]
    fn park_timeout_is_equal_jitter_over_retry_max_or_the_holders_ttl() {
        let o = options();
        assert_eq!(park_timeout(&o, None, &mut Min), ms(250)); // 500 / 2
        assert_eq!(park_timeout(&o, None, &mut Max), ms(500));
        assert_eq!(park_timeout(&o, Some(ms(100)), &mut Min), ms(50));
        assert_eq!(park_timeout(&o, Some(ms(100)), &mut Max), ms(100));
    }

    #[test]
    fn renew_retry_is_a_quarter_of_the_renew_interval() {
        let o = options(); // renew interval 1200 / 3 = 400 ms
        assert_eq!(renew_retry(&o), ms(100));
        let mut tiny = LockOptions::ttl(ms(3));
        tiny.renew_every = Some(Duration::from_micros(500));
        assert_eq!(renew_retry(&tiny), ms(1));
    }

    #[test]
    fn release_retry_doubles_and_is_capped_by_retry_max() {
        let mut o = options();
        assert_eq!(release_retry(&o, 1, &mut Max), ms(20));
        assert_eq!(release_retry(&o, 2, &mut Max), ms(40));
        o.retry_base = ms(400);
        assert_eq!(release_retry(&o, 2, &mut Max), ms(500)); // 1600 capped
    }
}
