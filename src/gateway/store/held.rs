//! For tests: the writer held in a write of its own, so that the writes queued meanwhile are
//! taken together, as one batch, once it lets go, or so that a caller can be dropped while its
//! write waits.

use tokio::task::JoinHandle;

use super::{Database, Store, StoreError};

/// The writer inside a write that waits for [`HeldWriter::let_go`].
pub(crate) struct HeldWriter {
    release: std::sync::mpsc::Sender<()>,
    write: JoinHandle<Result<(), StoreError>>,
}

impl Database {
    /// Returns once the writer is inside a write that waits for [`HeldWriter::let_go`].
    pub(crate) async fn hold(&self) -> HeldWriter {
        let (entered, writer_held) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let db = self.clone();
        let write = tokio::spawn(async move {
            db.write(move |_| {
                let _ = entered.send(());
                let _ = released.recv();
                Ok(())
            })
            .await
        });
        tokio::task::spawn_blocking(move || writer_held.recv())
            .await
            .unwrap()
            .unwrap();
        HeldWriter { release, write }
    }
}

impl Store {
    /// [`Database::hold`] for the store's writer.
    pub(crate) async fn hold_writer(&self) -> HeldWriter {
        self.db.hold().await
    }
}

impl HeldWriter {
    /// Lets the writer go on, and waits for the write that held it to commit.
    pub(crate) async fn let_go(self) {
        self.release.send(()).unwrap();
        self.write.await.unwrap().unwrap();
    }
}
