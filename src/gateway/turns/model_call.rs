//! A run's calls to its model providers, as its record keeps them ([`ModelCall`]), and when a
//! call that failed for a moment is made again ([`backoff`]): a provider that is down, throttled
//! or overloaded for a few seconds delays its runs instead of failing them
//! (docs/reliability.md#a-model-provider-that-fails-for-a-moment).

pub use crate::gateway::store::turn_record::{MAX_RECORDED, ModelCall};
use std::time::Duration;

use super::provider::ChatError;
use crate::gateway::clock::now_rfc3339;

/// The first wait between two passes over a run's models; doubled after each pass.
const FIRST_WAIT: Duration = Duration::from_millis(500);

/// The longest wait between two passes, `Retry-After` included: a provider asking for more is
/// asked again after this long (or the run ends, when its deadline comes first).
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// How long after its first pass over its models failed for a moment a run may still start
/// another: past it, the run ends with the last failure. A run keeps its runner slot, its
/// lane's slot and its session key while it waits, so a provider that stays down holds each of
/// them for this long at most beyond the failed calls, not for the run's whole timeout
/// (docs/runtime.md#a-provider-that-fails-for-a-moment).
pub const RETRY_SPAN: Duration = Duration::from_secs(60);

/// A run's calls so far: the last [`MAX_RECORDED`], and how many there were.
#[derive(Debug, Default)]
pub struct Calls {
    kept: Vec<ModelCall>,
    pub count: u32,
}

impl Calls {
    /// Records a call that began at `at`, with its failure if it failed.
    pub fn push(&mut self, model: &str, provider: &str, at: String, error: Option<&ChatError>) {
        if self.kept.len() == MAX_RECORDED {
            self.kept.remove(0);
        }
        self.kept.push(ModelCall {
            model: model.to_string(),
            provider: provider.to_string(),
            at,
            error: error.map(ToString::to_string),
            retry_in_ms: None,
        });
        self.count = self.count.saturating_add(1);
    }

    /// Notes the wait after the last call.
    pub fn waited(&mut self, wait: Duration) {
        if let Some(last) = self.kept.last_mut() {
            last.retry_in_ms = Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
        }
    }

    pub fn into_vec(self) -> Vec<ModelCall> {
        self.kept
    }
}

/// When a call begins, as its record says it.
pub fn started_at() -> String {
    now_rfc3339()
}

/// The wait before pass `pass` (from 1) over a run's models: [`FIRST_WAIT`] doubled per pass
/// with equal jitter (half of it fixed, half random, so that runs failing together do not come
/// back together), at least what a provider's `Retry-After` asked, at most [`MAX_WAIT`].
pub fn backoff(pass: u32, retry_after: Option<Duration>) -> Duration {
    let full = FIRST_WAIT
        .saturating_mul(1 << pass.saturating_sub(1).min(16))
        .min(MAX_WAIT);
    let jittered = full / 2 + (full / 2).mul_f64(rand::random::<f64>());
    jittered.max(retry_after.unwrap_or_default()).min(MAX_WAIT)
}

/// Whether a pass over a run's models may start `at`: only before the run's `deadline`, and
/// less than [`RETRY_SPAN`] after `first_failed`, when its first pass failed for a moment.
pub fn may_call_again(
    first_failed: tokio::time::Instant,
    at: tokio::time::Instant,
    deadline: tokio::time::Instant,
) -> bool {
    at < deadline && at.saturating_duration_since(first_failed) < RETRY_SPAN
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_honours_retry_after_and_is_capped() {
        for _ in 0..100 {
            let first = backoff(1, None);
            assert!(first >= FIRST_WAIT / 2 && first <= FIRST_WAIT, "{first:?}");
            let third = backoff(3, None);
            assert!(
                third >= FIRST_WAIT * 2 && third <= FIRST_WAIT * 4,
                "{third:?}"
            );
            assert!(backoff(40, None) <= MAX_WAIT);
        }
        assert_eq!(
            backoff(1, Some(Duration::from_secs(3))),
            Duration::from_secs(3)
        );
        assert_eq!(backoff(1, Some(Duration::from_secs(3600))), MAX_WAIT);
    }

    #[test]
    fn no_pass_starts_past_the_retry_span_or_the_deadline() {
        let failed = tokio::time::Instant::now();
        let far = failed + Duration::from_secs(600);
        let just_within = failed + RETRY_SPAN - Duration::from_millis(1);
        assert!(may_call_again(failed, failed + MAX_WAIT, far));
        assert!(may_call_again(failed, just_within, far));
        assert!(!may_call_again(failed, failed + RETRY_SPAN, far));
        assert!(!may_call_again(failed, failed + RETRY_SPAN * 2, far));
        // A deadline before the span ends stops it first.
        let soon = failed + Duration::from_secs(2);
        assert!(may_call_again(
            failed,
            failed + Duration::from_secs(1),
            soon
        ));
        assert!(!may_call_again(failed, soon, soon));
        assert!(!may_call_again(
            failed,
            failed + Duration::from_secs(3),
            soon
        ));
    }

    #[test]
    fn the_record_keeps_the_last_calls_and_counts_them_all() {
        let mut calls = Calls::default();
        let err = ChatError::Timeout(Duration::from_secs(1));
        for _ in 0..MAX_RECORDED + 5 {
            calls.push("m", "p", "t".into(), Some(&err));
        }
        calls.waited(Duration::from_millis(1500));
        assert_eq!(calls.count as usize, MAX_RECORDED + 5);
        let kept = calls.into_vec();
        assert_eq!(kept.len(), MAX_RECORDED);
        assert_eq!(kept.last().unwrap().retry_in_ms, Some(1500));
    }
}
