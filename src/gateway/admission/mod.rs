//! Admission limits: what decides, before a request is answered, whether its run is queued,
//! gathered into a batch, held or refused. Replay protection for signed deliveries
//! ([`replay`]), batches ([`batches`]), a mapping's lane at admission ([`lanes`]) and budgets
//! ([`budget`]), in the order intake applies them.

pub mod batches;
pub mod budget;
pub mod lanes;
pub mod replay;
