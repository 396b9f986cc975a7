//! Sending out: replies delivered to chat channels ([`chat`]), forward mode's relays to the
//! upstream gateway ([`relay`], by forward mode's worker [`relays`]), callbacks and lifecycle
//! webhooks ([`webhooks`], signed and sent by [`webhook_send`]; a refused hook request's
//! `request.refused`, bounded per endpoint, by [`refusals`]), and the durable outbox all are
//! sent through ([`outbox`]).

pub(super) mod chat;
pub(super) mod outbox;
mod outbox_rows;
pub(super) mod refusals;
pub(super) mod relay;
pub(super) mod relays;
pub(super) mod webhook_api;
pub(super) mod webhook_send;
pub(super) mod webhooks;
