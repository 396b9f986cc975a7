//! A transform's stdout and stderr: wasmtime-wasi's in-memory pipe, with a write too large for
//! the room left refused by a typed error, so that the call's failure is classified by type.

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

/// A guest wrote more to stdout or stderr at once than its pipe had room for. The call traps
/// with this error inside its `wasmtime::Error`, where `downcast_ref` finds it.
#[derive(Debug, thiserror::Error)]
#[error("write beyond the capacity of the output pipe")]
pub struct PipeOverflow;

/// An in-memory pipe of fixed capacity; clones share one buffer.
#[derive(Clone)]
pub struct BoundedPipe(MemoryOutputPipe);

impl BoundedPipe {
    pub fn new(capacity: usize) -> Self {
        BoundedPipe(MemoryOutputPipe::new(capacity))
    }

    /// Everything written so far: a copy, made under the pipe's lock.
    pub fn contents(&self) -> Bytes {
        self.0.contents()
    }
}

impl IsTerminal for BoundedPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for BoundedPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        self.0.async_stream()
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for BoundedPipe {
    async fn ready(&mut self) {}
}

#[wasmtime_wasi::async_trait]
impl OutputStream for BoundedPipe {
    /// As the memory pipe's own `write`, whose refusal of a write past its capacity is an
    /// untyped trap: that case is refused here first, with [`PipeOverflow`].
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        // A full pipe reports itself closed; it has no room at all.
        let room = match self.0.check_write() {
            Ok(room) => room,
            Err(StreamError::Closed) => 0,
            Err(other) => return Err(other),
        };
        if bytes.len() > room {
            return Err(StreamError::Trap(wasmtime::Error::new(PipeOverflow)));
        }
        self.0.write(bytes)
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        self.0.flush()
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        self.0.check_write()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_past_the_room_left_is_refused_with_a_typed_trap() {
        let mut pipe = BoundedPipe::new(4);
        pipe.write(Bytes::from_static(b"abc")).unwrap();
        let Err(StreamError::Trap(err)) = pipe.write(Bytes::from_static(b"de")) else {
            panic!("a write past the room left was taken");
        };
        assert!(err.downcast_ref::<PipeOverflow>().is_some(), "{err:?}");
        assert_eq!(pipe.contents(), "abc", "nothing of it was written");
        pipe.write(Bytes::from_static(b"d")).unwrap();
        let Err(StreamError::Trap(err)) = pipe.write(Bytes::from_static(b"e")) else {
            panic!("a write to a full pipe was taken");
        };
        assert!(err.downcast_ref::<PipeOverflow>().is_some(), "{err:?}");
        assert!(
            pipe.write(Bytes::new()).is_ok(),
            "an empty write fits anywhere"
        );
    }
}
