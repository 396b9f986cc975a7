//! Hook authentication: where the token may come from (its comparison is `crate::hook::token`),
//! and the lockout of clients that keep presenting wrong ones (docs/http-contract.md, step 4).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;

use crate::client::ClientKey;

/// The token of an `Authorization: Bearer <t>` header (scheme case-insensitive, value trimmed).
pub fn presented_bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.trim().split_once(char::is_whitespace)?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
        .filter(|t| !t.is_empty())
}

/// The hook token a request presents: the bearer token first, then `X-Service-Token`, then its
/// alias `X-OpenClaw-Token`.
pub fn presented_token(headers: &HeaderMap) -> Option<&str> {
    presented_bearer(headers).or_else(|| {
        ["x-service-token", "x-openclaw-token"]
            .iter()
            .find_map(|name| {
                headers
                    .get(*name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
            })
    })
}

/// Counts failed authentications per key (a client, or a client and a mapping) and locks out
/// keys that fail too often.
///
/// A key whose failures reach `max_failures` within `window` is locked out for `lockout`.
/// Memory is bounded: at most `max_keys` entries are kept. Every operation is O(1) amortised,
/// eviction included, under one mutex: when full, the entry whose lockout ended longest ago goes
/// first, then the oldest unlocked one, then the oldest lockout (so that flooding the table with
/// new addresses frees a locked-out client only once every unlocked entry is gone).
/// Every method takes `now` so that the rule is testable without waiting.
#[derive(Debug)]
pub struct AuthFailureLimiter<K = ClientKey> {
    table: Mutex<Table<K>>,
    max_failures: u32,
    window: Duration,
    lockout: Duration,
    max_keys: usize,
}

#[derive(Debug)]
struct Table<K> {
    entries: HashMap<K, Entry>,
    /// Keys in the order their counting windows started, each with the stamp of the entry it
    /// was queued for: an item whose entry was since replaced or removed is stale and skipped.
    unlocked: VecDeque<(K, u64)>,
    /// Keys in the order they were locked out, likewise.
    locked: VecDeque<(K, u64)>,
    next_stamp: u64,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    stamp: u64,
    window_start: Instant,
    count: u32,
    locked_until: Option<Instant>,
}

impl Entry {
    fn expired(&self, now: Instant, window: Duration) -> bool {
        match self.locked_until {
            Some(until) => now >= until,
            None => now.duration_since(self.window_start) >= window,
        }
    }
}

impl<K: Hash + Eq + Clone> Table<K> {
    fn stamp(&mut self) -> u64 {
        self.next_stamp += 1;
        self.next_stamp
    }

    fn is_live(&self, (key, stamp): &(K, u64)) -> bool {
        self.entries.get(key).is_some_and(|e| e.stamp == *stamp)
    }

    /// Drops stale items from the front of both queues, and compacts a queue that has become
    /// mostly stale (keys cleared by a success leave their items behind), so that the queues
    /// stay within a constant factor of the table.
    fn tidy(&mut self) {
        for locked in [false, true] {
            loop {
                let queue = if locked { &self.locked } else { &self.unlocked };
                match queue.front() {
                    Some(front) if !self.is_live(front) => {}
                    _ => break,
                }
                if locked {
                    self.locked.pop_front();
                } else {
                    self.unlocked.pop_front();
                }
            }
        }
        let bound = 2 * self.entries.len() + 16;
        if self.unlocked.len() + self.locked.len() > bound {
            let entries = &self.entries;
            let live =
                |(key, stamp): &(K, u64)| entries.get(key).is_some_and(|e| e.stamp == *stamp);
            self.unlocked.retain(live);
            self.locked.retain(live);
        }
    }

    /// Removes one entry, as the type's documentation orders them.
    fn evict(&mut self, now: Instant) {
        self.tidy();
        let lock_ended = self
            .locked
            .front()
            .and_then(|(key, _)| self.entries.get(key))
            .and_then(|e| e.locked_until)
            .is_some_and(|until| now >= until);
        let queue = if lock_ended || self.unlocked.is_empty() {
            &mut self.locked
        } else {
            &mut self.unlocked
        };
        if let Some((key, _)) = queue.pop_front() {
            self.entries.remove(&key);
        }
    }
}

impl Default for AuthFailureLimiter {
    /// 20 failures in 60 s lock a client out for 60 s.
    fn default() -> Self {
        AuthFailureLimiter::new(20, Duration::from_secs(60), Duration::from_secs(60), 65_536)
    }
}

impl<K: Hash + Eq + Clone> AuthFailureLimiter<K> {
    pub fn new(max_failures: u32, window: Duration, lockout: Duration, max_keys: usize) -> Self {
        AuthFailureLimiter {
            table: Mutex::new(Table {
                entries: HashMap::new(),
                unlocked: VecDeque::new(),
                locked: VecDeque::new(),
                next_stamp: 0,
            }),
            max_failures,
            window,
            lockout,
            max_keys: max_keys.max(1),
        }
    }

    /// `Err(retry_after)` while `key` is locked out.
    pub fn check(&self, key: &K, now: Instant) -> Result<(), Duration> {
        let table = self.lock();
        match table.entries.get(key).and_then(|e| e.locked_until) {
            Some(until) if now < until => Err(until - now),
            _ => Ok(()),
        }
    }

    /// Records one failure of `key`, locking it out when it reaches the limit.
    pub fn record_failure(&self, key: &K, now: Instant) {
        let mut table = self.lock();
        let table = &mut *table;
        let fresh = match table.entries.get(key) {
            None => {
                if table.entries.len() >= self.max_keys {
                    table.evict(now);
                }
                true
            }
            Some(entry) => entry.expired(now, self.window),
        };
        if fresh {
            let stamp = table.stamp();
            table.entries.insert(
                key.clone(),
                Entry {
                    stamp,
                    window_start: now,
                    count: 0,
                    locked_until: None,
                },
            );
            table.unlocked.push_back((key.clone(), stamp));
        }
        let stamp = table.stamp();
        let Some(entry) = table.entries.get_mut(key) else {
            return;
        };
        entry.count += 1;
        if entry.count >= self.max_failures && entry.locked_until.is_none() {
            entry.locked_until = Some(now + self.lockout);
            entry.stamp = stamp;
            table.locked.push_back((key.clone(), stamp));
        }
        table.tidy();
    }

    /// Forgets `key`'s failures (after it authenticated).
    pub fn clear(&self, key: &K) {
        let mut table = self.lock();
        if table.entries.remove(key).is_some() {
            table.tidy();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table<K>> {
        // The table holds plain counters; a panic elsewhere cannot leave it inconsistent.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn bearer_wins_over_service_token() {
        let h = headers(&[
            ("authorization", "bEaReR  abc "),
            ("x-service-token", "def"),
        ]);
        assert_eq!(presented_token(&h), Some("abc"));
    }

    #[test]
    fn service_token_and_alias() {
        assert_eq!(
            presented_token(&headers(&[("x-service-token", " t ")])),
            Some("t")
        );
        assert_eq!(
            presented_token(&headers(&[("x-openclaw-token", "u")])),
            Some("u")
        );
        assert_eq!(
            presented_token(&headers(&[("authorization", "Basic x")])),
            None
        );
    }

    fn ip(last: u8) -> ClientKey {
        ClientKey::of(std::net::IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn twenty_failures_lock_out_for_sixty_seconds() {
        let limiter = AuthFailureLimiter::default();
        let t0 = Instant::now();
        for _ in 0..19 {
            limiter.record_failure(&ip(1), t0);
        }
        assert!(limiter.check(&ip(1), t0).is_ok());
        limiter.record_failure(&ip(1), t0);
        assert_eq!(limiter.check(&ip(1), t0), Err(Duration::from_secs(60)));
        assert!(limiter.check(&ip(2), t0).is_ok());
        let later = t0 + Duration::from_secs(60);
        assert!(limiter.check(&ip(1), later).is_ok());
    }

    #[test]
    fn failures_outside_the_window_do_not_add_up() {
        let limiter = AuthFailureLimiter::default();
        let t0 = Instant::now();
        for _ in 0..19 {
            limiter.record_failure(&ip(1), t0);
        }
        limiter.record_failure(&ip(1), t0 + Duration::from_secs(61));
        assert!(limiter.check(&ip(1), t0 + Duration::from_secs(61)).is_ok());
    }

    #[test]
    fn clear_forgets_failures() {
        let limiter = AuthFailureLimiter::default();
        let t0 = Instant::now();
        for _ in 0..19 {
            limiter.record_failure(&ip(1), t0);
        }
        limiter.clear(&ip(1));
        limiter.record_failure(&ip(1), t0);
        assert!(limiter.check(&ip(1), t0).is_ok());
    }

    #[test]
    fn memory_is_bounded() {
        let limiter =
            AuthFailureLimiter::new(20, Duration::from_secs(60), Duration::from_secs(60), 4);
        let t0 = Instant::now();
        for i in 0..50 {
            limiter.record_failure(&ip(i), t0);
        }
        assert!(limiter.lock().entries.len() <= 4);
    }

    #[test]
    fn a_full_table_evicts_unlocked_clients_before_locked_ones() {
        let limiter =
            AuthFailureLimiter::new(2, Duration::from_secs(60), Duration::from_secs(60), 3);
        let t0 = Instant::now();
        limiter.record_failure(&ip(1), t0);
        limiter.record_failure(&ip(1), t0);
        assert!(limiter.check(&ip(1), t0).is_err());
        for i in 2..200 {
            limiter.record_failure(&ip(i), t0);
        }
        assert!(
            limiter.check(&ip(1), t0).is_err(),
            "the lockout survived the flood"
        );
        let table = limiter.lock();
        assert!(table.entries.len() <= 3);
        assert!(table.unlocked.len() + table.locked.len() <= 2 * 3 + 16);
    }

    #[test]
    fn clearing_keeps_the_queues_bounded() {
        let limiter = AuthFailureLimiter::default();
        let t0 = Instant::now();
        for _ in 0..10_000 {
            limiter.record_failure(&ip(1), t0);
            limiter.clear(&ip(1));
        }
        let table = limiter.lock();
        assert!(table.unlocked.len() + table.locked.len() <= 16);
    }

    #[test]
    fn an_ended_lockout_is_evicted_first() {
        let limiter =
            AuthFailureLimiter::new(1, Duration::from_secs(60), Duration::from_secs(1), 2);
        let t0 = Instant::now();
        limiter.record_failure(&ip(1), t0);
        let later = t0 + Duration::from_secs(2);
        limiter.record_failure(&ip(2), later);
        limiter.record_failure(&ip(3), later);
        assert!(
            limiter.check(&ip(2), later).is_err(),
            "ip 2 is still locked out"
        );
        assert!(limiter.check(&ip(3), later).is_err());
    }

    #[test]
    fn ipv6_clients_count_by_their_64() {
        let limiter =
            AuthFailureLimiter::new(3, Duration::from_secs(60), Duration::from_secs(60), 100);
        let now = Instant::now();
        for i in 1..=3u16 {
            let ip = std::net::IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, i));
            limiter.record_failure(&ClientKey::of(ip), now);
        }
        let key = |text: &str| ClientKey::of(text.parse().unwrap());
        assert!(
            limiter.check(&key("2001:db8:0:1::ffff"), now).is_err(),
            "one /64, one lockout"
        );
        assert!(limiter.check(&key("2001:db8:0:2::1"), now).is_ok());
        assert!(limiter.check(&key("192.0.2.1"), now).is_ok());
    }
}
