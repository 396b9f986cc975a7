//! The engine's call slots (`hooks.transformLimits.maxConcurrent`), shared fairly between
//! mappings: one mapping's slow transform must not starve the others.
//!
//! Two rules do it. A mapping holds at most half the slots (rounded up), so a flood on one
//! mapping always leaves slots free for the rest; and a freed slot goes to the waiting mapping
//! with the fewest calls in progress, not to whoever queued first, so a mapping with a long queue
//! cannot keep the slots it frees. A single busy mapping is the only cost: it runs at most half
//! the slots at once, which on a machine with fewer cores than slots loses nothing.
//!
//! A dry run's calls ([`SlotShare::Trials`]) are one lane of their own, whatever mapping they
//! try: they never take a slot of a mapping's share from its live requests, and all of them
//! together hold no more than one mapping may. Between lanes with as many calls in progress, the
//! freed slot goes to the call that has waited longest, whichever lane it is in: the dry runs'
//! lane wins its ties as often as a mapping's does.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;
use tokio::sync::oneshot;

/// Whose share of the slots a call takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotShare {
    /// Its mapping's: a live request's call (or `hookgate transform run`'s).
    Mapping,
    /// The dry runs': one lane for every trial's call, apart from every mapping's.
    Trials,
}

/// A lane of the slots: a mapping's, or the dry runs'.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum LaneKey {
    Mapping(Arc<str>),
    Trials,
}

/// The slots. Cheap to clone.
#[derive(Clone)]
pub struct CallSlots {
    state: Arc<Mutex<State>>,
}

/// Idle mappings' lanes kept: a mapping's next call finds its lane, and takes a slot without
/// making a key for it. Idle lanes are dropped only as a new lane is made while there are this
/// many or more: the map holds at most this many lanes, or, past that, as many as had calls in
/// progress or waiting at once when a lane was last made, plus that one. (Mapping ids are the
/// configured ones: the map never outgrows the configuration either.)
const KEPT_LANES: usize = 64;

/// The capacity a lane's queue keeps once it empties: a burst's queue is given back, so an idle
/// lane holds no more than this.
const KEPT_QUEUE: usize = 8;

struct State {
    free: usize,
    /// The most slots one mapping may hold.
    per_mapping: usize,
    /// Calls waiting in all lanes, those that gave up included until their turn skips them:
    /// while there are none, a freed slot goes back to the pool without a search.
    waiting: usize,
    /// The number the next call to wait is given: the order calls queued in, across lanes.
    queued: u64,
    /// The mappings' lanes: those with calls in progress or waiting, and idle ones as
    /// [`KEPT_LANES`] says. Keyed by configured mapping ids, hashed without SipHash.
    lanes: FxHashMap<Arc<str>, Lane>,
    /// The dry runs' lane.
    trials: Lane,
}

impl State {
    fn lane(&mut self, key: &LaneKey) -> Option<&mut Lane> {
        match key {
            LaneKey::Mapping(mapping) => self.lanes.get_mut(&**mapping),
            LaneKey::Trials => Some(&mut self.trials),
        }
    }

    /// The key of `mapping`'s lane, made (with the lane) if it has none.
    fn mapping_key(&mut self, mapping: &str) -> LaneKey {
        if let Some((key, _)) = self.lanes.get_key_value(mapping) {
            return LaneKey::Mapping(Arc::clone(key));
        }
        if self.lanes.len() >= KEPT_LANES {
            self.lanes.retain(|_, lane| !lane.is_idle());
        }
        let key: Arc<str> = Arc::from(mapping);
        self.lanes.insert(Arc::clone(&key), Lane::default());
        LaneKey::Mapping(key)
    }
}

#[derive(Default)]
struct Lane {
    in_use: usize,
    /// Calls waiting for a slot, oldest first, each with the number it queued as. A waiter that
    /// gave up (its call timed out) leaves a closed sender, skipped when its turn comes.
    waiting: VecDeque<(u64, oneshot::Sender<CallSlot>)>,
}

impl Lane {
    fn is_idle(&self) -> bool {
        self.in_use == 0 && self.waiting.is_empty()
    }

    /// The oldest waiter, and with it the queue's capacity past [`KEPT_QUEUE`] once it empties.
    fn next_waiter(&mut self) -> Option<oneshot::Sender<CallSlot>> {
        let (_, waiter) = self.waiting.pop_front()?;
        if self.waiting.is_empty() && self.waiting.capacity() > KEPT_QUEUE {
            self.waiting.shrink_to(KEPT_QUEUE);
        }
        Some(waiter)
    }
}

/// One slot, held for one call; given back (to the next waiter, or to the pool) when dropped.
pub struct CallSlot {
    /// `None` once given back.
    held: Option<(Arc<Mutex<State>>, LaneKey)>,
}

impl CallSlots {
    /// `total` slots, at least one; a mapping may hold at most half of them, rounded up.
    pub fn new(total: usize) -> CallSlots {
        let total = total.max(1);
        CallSlots {
            state: Arc::new(Mutex::new(State {
                free: total,
                per_mapping: total.div_ceil(2),
                waiting: 0,
                queued: 0,
                lanes: FxHashMap::default(),
                trials: Lane::default(),
            })),
        }
    }

    /// Waits for a slot for a call of `mapping`, in the lane `share` names. Cancel-safe:
    /// dropping the future gives up the place in the queue, and a slot handed to it meanwhile
    /// goes back.
    #[cfg(test)]
    pub async fn acquire(&self, share: SlotShare, mapping: &str) -> CallSlot {
        match self.claim(share, mapping) {
            Ok(slot) => slot,
            Err(queued) => queued.wait().await,
        }
    }

    /// A slot for a call of `mapping` at once if the lane `share` names may take a free one,
    /// else a place in its queue.
    pub fn claim(&self, share: SlotShare, mapping: &str) -> Result<CallSlot, Queued> {
        let mut state = lock(&self.state);
        let state = &mut *state;
        let key = match share {
            SlotShare::Mapping => state.mapping_key(mapping),
            SlotShare::Trials => LaneKey::Trials,
        };
        let (free, per_mapping, queued) = (state.free, state.per_mapping, state.queued);
        let lane = state
            .lane(&key)
            .expect("the key's lane was just found or made");
        if free > 0 && lane.in_use < per_mapping && lane.waiting.is_empty() {
            lane.in_use += 1;
            state.free -= 1;
            return Ok(CallSlot {
                held: Some((Arc::clone(&self.state), key)),
            });
        }
        let mut gave_up = 0;
        if lane.waiting.len() >= 2 * per_mapping {
            let before = lane.waiting.len();
            lane.waiting.retain(|(_, waiter)| !waiter.is_closed());
            gave_up = before - lane.waiting.len();
        }
        let (sender, receiver) = oneshot::channel();
        lane.waiting.push_back((queued, sender));
        state.queued += 1;
        state.waiting = state.waiting + 1 - gave_up;
        Err(Queued(receiver))
    }
}

/// A call's place in its lane's queue. Dropping it gives the place up, and a slot handed to it
/// meanwhile goes back.
pub struct Queued(oneshot::Receiver<CallSlot>);

impl Queued {
    /// Waits for the slot.
    pub async fn wait(self) -> CallSlot {
        // The sender is dropped unsent only by `dispatch`, which never does so for an open
        // receiver: every waiter is either handed a slot or still queued.
        self.0
            .await
            .expect("a queued call is handed a slot before its sender is dropped")
    }
}

impl Drop for CallSlot {
    fn drop(&mut self) {
        let Some((state, key)) = self.held.take() else {
            return;
        };
        let mut guard = lock(&state);
        guard.free += 1;
        if let Some(lane) = guard.lane(&key) {
            lane.in_use -= 1;
        }
        if guard.waiting > 0 {
            dispatch(&mut guard, &state);
        }
    }
}

/// Hands free slots to waiting calls: the lane with the fewest calls in progress first, and
/// between lanes with as many, the one whose oldest waiter queued first. Runs under the lock; a
/// slot whose waiter has gone is taken back without being dropped (its drop would take the lock
/// again).
fn dispatch(state: &mut State, shared: &Arc<Mutex<State>>) {
    while state.free > 0 && state.waiting > 0 {
        let per_mapping = state.per_mapping;
        // A lane that may take a slot, ranked by its calls in progress, then its oldest waiter.
        let rank = |lane: &Lane| match lane.waiting.front() {
            Some((queued, _)) if lane.in_use < per_mapping => Some((lane.in_use, *queued)),
            _ => None,
        };
        let trials = rank(&state.trials).map(|rank| (LaneKey::Trials, rank));
        let next = state
            .lanes
            .iter()
            .filter_map(|(key, lane)| Some((LaneKey::Mapping(Arc::clone(key)), rank(lane)?)))
            .chain(trials)
            .min_by_key(|(_, rank)| *rank)
            .map(|(key, _)| key);
        let Some(key) = next else { break };
        let lane = state.lane(&key).expect("just found");
        let waiter = lane.next_waiter().expect("has waiters");
        lane.in_use += 1;
        state.free -= 1;
        state.waiting -= 1;
        let slot = CallSlot {
            held: Some((Arc::clone(shared), key)),
        };
        if let Err(mut unclaimed) = waiter.send(slot) {
            let (_, key) = unclaimed.held.take().expect("made held");
            if let Some(lane) = state.lane(&key) {
                lane.in_use -= 1;
            }
            state.free += 1;
        }
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    // Plain counters and queues: a panic elsewhere cannot leave them inconsistent.
    state.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(slots: &CallSlots) -> (usize, Vec<(String, usize, usize)>) {
        // Idle lanes are kept, but not counted: they hold nothing.
        let state = lock(&slots.state);
        let mut lanes: Vec<_> = state
            .lanes
            .iter()
            .map(|(key, l)| (key.to_string(), l))
            .chain([("(trials)".to_string(), &state.trials)])
            .filter(|(_, l)| !l.is_idle())
            .map(|(name, l)| (name, l.in_use, l.waiting.len()))
            .collect();
        lanes.sort();
        (state.free, lanes)
    }

    #[tokio::test]
    async fn one_mapping_holds_at_most_half_and_a_freed_slot_goes_to_the_poorer_mapping() {
        let slots = CallSlots::new(4);
        let a1 = slots.acquire(SlotShare::Mapping, "a").await;
        let _a2 = slots.acquire(SlotShare::Mapping, "a").await;
        // "a" is at its half: its third call waits although two slots are free.
        let a3 = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire(SlotShare::Mapping, "a").await }
        });
        tokio::task::yield_now().await;
        let _b1 = slots.acquire(SlotShare::Mapping, "b").await;
        let _b2 = slots.acquire(SlotShare::Mapping, "b").await;
        let b3 = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire(SlotShare::Mapping, "b").await }
        });
        tokio::task::yield_now().await;
        let c1 = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire(SlotShare::Mapping, "c").await }
        });
        tokio::task::yield_now().await;
        assert_eq!(
            counts(&slots),
            (
                0,
                vec![("a".into(), 2, 1), ("b".into(), 2, 1), ("c".into(), 0, 1)]
            )
        );
        // The slot "a" frees goes to "c", which has nothing in progress, though "a" and "b"
        // queued first.
        drop(a1);
        let _c1 = c1.await.unwrap();
        assert_eq!(counts(&slots).1[2], ("c".into(), 1, 0));
        assert!(!a3.is_finished() && !b3.is_finished());
        a3.abort();
        b3.abort();
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_leaves_no_slot_behind() {
        let slots = CallSlots::new(2);
        let held = slots.acquire(SlotShare::Mapping, "a").await;
        let gave_up = tokio::time::timeout(
            std::time::Duration::from_millis(1),
            slots.acquire(SlotShare::Mapping, "a"),
        )
        .await;
        assert!(gave_up.is_err());
        drop(held);
        assert_eq!(counts(&slots), (2, vec![]));
        let _again = slots.acquire(SlotShare::Mapping, "a").await;
        assert_eq!(counts(&slots), (1, vec![("a".into(), 1, 0)]));
    }

    #[tokio::test]
    async fn trials_take_a_lane_of_their_own_and_leave_a_mappings_share_to_it() {
        let slots = CallSlots::new(4);
        let _t1 = slots.acquire(SlotShare::Trials, "a").await;
        let _t2 = slots.acquire(SlotShare::Trials, "b").await;
        // The trials are at their half: a third waits although two slots are free...
        let t3 = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire(SlotShare::Trials, "a").await }
        });
        tokio::task::yield_now().await;
        // ...and mapping "a" still has its whole share for its live calls.
        let _a1 = slots.acquire(SlotShare::Mapping, "a").await;
        let _a2 = slots.acquire(SlotShare::Mapping, "a").await;
        assert_eq!(
            counts(&slots),
            (0, vec![("(trials)".into(), 2, 1), ("a".into(), 2, 0)])
        );
        assert!(!t3.is_finished());
        t3.abort();
    }

    #[test]
    fn an_idle_lane_is_kept_for_its_mappings_next_call_and_idle_lanes_are_bounded() {
        let slots = CallSlots::new(4);
        let lanes = |slots: &CallSlots| lock(&slots.state).lanes.len();
        drop(slots.claim(SlotShare::Mapping, "a").ok().unwrap());
        drop(slots.claim(SlotShare::Mapping, "a").ok().unwrap());
        assert_eq!(lanes(&slots), 1, "the second call found the first's lane");
        let held = slots.claim(SlotShare::Mapping, "busy").ok().unwrap();
        for i in 0..3 * KEPT_LANES {
            drop(
                slots
                    .claim(SlotShare::Mapping, &format!("m{i}"))
                    .ok()
                    .unwrap(),
            );
        }
        assert!(lanes(&slots) <= KEPT_LANES + 1, "{}", lanes(&slots));
        // A lane with a call in progress is never dropped with the idle ones.
        assert_eq!(counts(&slots), (3, vec![("busy".into(), 1, 0)]));
        drop(held);
        assert_eq!(counts(&slots), (4, vec![]));
    }

    /// A freed slot that two lanes with as many calls in progress may take goes to the call
    /// that queued first: here the dry run's, which lost every such tie to a mapping's.
    #[tokio::test]
    async fn a_tie_between_lanes_goes_to_the_call_that_queued_first() {
        let slots = CallSlots::new(4);
        let b1 = slots.acquire(SlotShare::Mapping, "b").await;
        let _b2 = slots.acquire(SlotShare::Mapping, "b").await;
        let _a1 = slots.acquire(SlotShare::Mapping, "a").await;
        let _t1 = slots.acquire(SlotShare::Trials, "a").await;
        let trial = slots.claim(SlotShare::Trials, "a").err().unwrap();
        let live = slots.claim(SlotShare::Mapping, "a").err().unwrap();
        assert_eq!(
            counts(&slots),
            (
                0,
                vec![
                    ("(trials)".into(), 1, 1),
                    ("a".into(), 1, 1),
                    ("b".into(), 2, 0)
                ]
            )
        );
        drop(b1);
        assert_eq!(counts(&slots).1[0], ("(trials)".into(), 2, 0));
        assert_eq!(counts(&slots).1[1], ("a".into(), 1, 1));
        let _t2 = trial.wait().await;
        drop(live);
    }

    /// A lane's queue gives back what a burst made it take once it empties.
    #[tokio::test]
    async fn an_emptied_queue_gives_its_capacity_back() {
        let slots = CallSlots::new(2);
        let mut slot = slots.acquire(SlotShare::Mapping, "a").await;
        let burst: Vec<Queued> = (0..100)
            .map(|_| slots.claim(SlotShare::Mapping, "a").err().unwrap())
            .collect();
        let capacity = |slots: &CallSlots| lock(&slots.state).lanes["a"].waiting.capacity();
        assert!(capacity(&slots) >= 100);
        for queued in burst {
            drop(slot);
            slot = queued.wait().await;
        }
        drop(slot);
        assert_eq!(counts(&slots), (2, vec![]));
        assert!(capacity(&slots) <= KEPT_QUEUE, "{}", capacity(&slots));
    }
}
