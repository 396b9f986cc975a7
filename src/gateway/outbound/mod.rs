//! Sending out: replies delivered to chat channels ([`chat`]), forward mode's relays to the
//! upstream gateway ([`relay`], by forward mode's worker [`relays`]), and the durable outbox both
//! are sent through ([`outbox`]).

pub(super) mod chat;
pub(super) mod outbox;
mod outbox_rows;
pub(super) mod relay;
pub(super) mod relays;
