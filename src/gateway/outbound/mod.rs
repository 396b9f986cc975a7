//! Sending out: replies delivered to chat channels ([`chat`]), forward mode's relays to the
//! upstream gateway ([`relay`]), and the durable outbox both are sent through ([`outbox`]).

pub(super) mod chat;
pub(super) mod outbox;
pub(super) mod relay;
