//! Integration tests: each starts the real `hookgate` binary on 127.0.0.1 and speaks HTTP to it.

mod fake;
mod harness;
mod nats;

mod agent;
mod api;
mod cluster;
mod config;
mod connections;
mod console;
mod contract;
mod contrib;
mod conventions;
mod crash;
mod durability;
mod example;
mod failover;
mod files;
mod hostile;
mod js;
mod limits;
mod mapped;
mod metrics;
mod openclaw;
mod openclaw_config;
mod parity;
mod pipeline;
mod reload;
mod requests;
mod retention;
mod runtime;
mod scaffold;
mod security;
mod signatures;
mod transforms;
mod wake;
