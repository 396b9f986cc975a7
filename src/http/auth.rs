//! Hook authentication: where the token may come from, how it is compared, and the lockout of
//! clients that keep presenting wrong ones (behaviour §2, step 4).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

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

/// Compares a presented token with the expected one in time that depends on neither their
/// contents nor their lengths: both are hashed first, and the digests compared in constant time.
pub fn token_matches(presented: Option<&str>, expected: &str) -> bool {
    let Some(presented) = presented else {
        return false;
    };
    let a = Sha256::digest(presented.as_bytes());
    let b = Sha256::digest(expected.as_bytes());
    a.ct_eq(&b).into()
}

/// The identity a client's failures count under: its IPv4 address, or its IPv6 /64. One host
/// usually holds a whole /64, so keying by /128 would let it guess from 2^64 addresses.
fn key(client: IpAddr) -> IpAddr {
    match client.to_canonical() {
        IpAddr::V6(v6) => {
            let segments = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(
                segments[0],
                segments[1],
                segments[2],
                segments[3],
                0,
                0,
                0,
                0,
            ))
        }
        v4 => v4,
    }
}

/// Counts failed authentications per client and locks out clients that fail too often.
///
/// A client whose failures reach `max_failures` within `window` is locked out for `lockout`.
/// Memory is bounded: at most `max_clients` entries are kept, expired ones pruned first.
/// Every method takes `now` so that the rule is testable without waiting.
#[derive(Debug)]
pub struct AuthFailureLimiter {
    clients: Mutex<HashMap<IpAddr, Failures>>,
    max_failures: u32,
    window: Duration,
    lockout: Duration,
    max_clients: usize,
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    window_start: Instant,
    count: u32,
    locked_until: Option<Instant>,
}

impl Failures {
    fn expired(&self, now: Instant, window: Duration) -> bool {
        match self.locked_until {
            Some(until) => now >= until,
            None => now.duration_since(self.window_start) >= window,
        }
    }
}

impl Default for AuthFailureLimiter {
    /// 20 failures in 60 s lock a client out for 60 s.
    fn default() -> Self {
        AuthFailureLimiter::new(20, Duration::from_secs(60), Duration::from_secs(60), 65_536)
    }
}

impl AuthFailureLimiter {
    pub fn new(max_failures: u32, window: Duration, lockout: Duration, max_clients: usize) -> Self {
        AuthFailureLimiter {
            clients: Mutex::new(HashMap::new()),
            max_failures,
            window,
            lockout,
            max_clients,
        }
    }

    /// `Err(retry_after)` while `client` is locked out.
    pub fn check(&self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        let client = key(client);
        let clients = self.lock();
        match clients.get(&client).and_then(|f| f.locked_until) {
            Some(until) if now < until => Err(until - now),
            _ => Ok(()),
        }
    }

    /// Records one failure of `client`, locking it out when it reaches the limit.
    pub fn record_failure(&self, client: IpAddr, now: Instant) {
        let client = key(client);
        let mut clients = self.lock();
        if clients.len() >= self.max_clients && !clients.contains_key(&client) {
            self.make_room(&mut clients, now);
        }
        let entry = clients.entry(client).or_insert(Failures {
            window_start: now,
            count: 0,
            locked_until: None,
        });
        if entry.expired(now, self.window) {
            *entry = Failures {
                window_start: now,
                count: 0,
                locked_until: None,
            };
        }
        entry.count += 1;
        if entry.count >= self.max_failures {
            entry.locked_until = Some(now + self.lockout);
        }
    }

    /// Forgets `client`'s failures (after it authenticated).
    pub fn clear(&self, client: IpAddr) {
        self.lock().remove(&key(client));
    }

    fn make_room(&self, clients: &mut HashMap<IpAddr, Failures>, now: Instant) {
        clients.retain(|_, f| !f.expired(now, self.window));
        if clients.len() >= self.max_clients {
            // Still full of live entries: evict the oldest unlocked one, else the oldest.
            let oldest = clients
                .iter()
                .min_by_key(|(_, f)| (f.locked_until.is_some(), f.window_start))
                .map(|(ip, _)| *ip);
            if let Some(ip) = oldest {
                clients.remove(&ip);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Failures>> {
        // The map holds plain counters; a panic elsewhere cannot leave it inconsistent.
        self.clients.lock().unwrap_or_else(|p| p.into_inner())
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

    #[test]
    fn comparison() {
        assert!(token_matches(Some("secret"), "secret"));
        assert!(!token_matches(Some("secre"), "secret"));
        assert!(!token_matches(None, "secret"));
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn twenty_failures_lock_out_for_sixty_seconds() {
        let limiter = AuthFailureLimiter::default();
        let t0 = Instant::now();
        for _ in 0..19 {
            limiter.record_failure(ip(1), t0);
        }
        assert!(limiter.check(ip(1), t0).is_ok());
        limiter.record_failure(ip(1), t0);
        assert_eq!(limiter.check(ip(1), t0), Err(Duration::from_secs(60)));
        assert!(limiter.check(ip(2), t0).is_ok());
        let later = t0 + Duration::from_secs(60);
        assert!(limiter.check(ip(1), later).is_ok());
    }

    #[test]
    fn failures_outside_the_window_do_not_add_up() {
        let limiter = AuthFailureLimiter::default();
        let t0 = Instant::now();
        for _ in 0..19 {
            limiter.record_failure(ip(1), t0);
        }
        limiter.record_failure(ip(1), t0 + Duration::from_secs(61));
        assert!(limiter.check(ip(1), t0 + Duration::from_secs(61)).is_ok());
    }

    #[test]
    fn clear_forgets_failures() {
        let limiter = AuthFailureLimiter::default();
        let t0 = Instant::now();
        for _ in 0..19 {
            limiter.record_failure(ip(1), t0);
        }
        limiter.clear(ip(1));
        limiter.record_failure(ip(1), t0);
        assert!(limiter.check(ip(1), t0).is_ok());
    }

    #[test]
    fn memory_is_bounded() {
        let limiter =
            AuthFailureLimiter::new(20, Duration::from_secs(60), Duration::from_secs(60), 4);
        let t0 = Instant::now();
        for i in 0..50 {
            limiter.record_failure(ip(i), t0);
        }
        assert!(limiter.lock().len() <= 4);
    }

    #[test]
    fn ipv6_clients_count_by_their_64() {
        let limiter =
            AuthFailureLimiter::new(3, Duration::from_secs(60), Duration::from_secs(60), 100);
        let now = Instant::now();
        for i in 1..=3u16 {
            let ip = IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, i));
            limiter.record_failure(ip, now);
        }
        let sibling: IpAddr = "2001:db8:0:1::ffff".parse().unwrap();
        assert!(limiter.check(sibling, now).is_err(), "one /64, one lockout");
        let other: IpAddr = "2001:db8:0:2::1".parse().unwrap();
        assert!(limiter.check(other, now).is_ok());
        let v4: IpAddr = "192.0.2.1".parse().unwrap();
        assert!(limiter.check(v4, now).is_ok());
    }
}
