//! Opening a store by its kind: the one module that knows every
//! implementation, so that the harness above it needs only the trait and
//! the stores below it need nothing of each other.

use std::path::Path;

use crate::error::BenchError;
use crate::payonce_store::PayonceStore;
use crate::sled_store::{SledStore, SledSync};
use crate::sqlite_store::{Connections, SqliteStore};
use crate::store::{Durability, Store, StoreKind};

/// Opens (or creates) the store of `kind` in `dir`.
pub fn open_store(
    kind: StoreKind,
    dir: &Path,
    durability: Durability,
) -> Result<Box<dyn Store>, BenchError> {
    Ok(match kind {
        StoreKind::Payonce => Box::new(PayonceStore::open(dir, durability)?),
        StoreKind::Sqlite => Box::new(SqliteStore::open(dir, durability, Connections::PerThread)?),
        StoreKind::SqliteShared => {
            Box::new(SqliteStore::open(dir, durability, Connections::Shared)?)
        }
        StoreKind::Sled => Box::new(SledStore::open(dir, durability, SledSync::Fdatasync)?),
        StoreKind::SledFlushOnly => {
            Box::new(SledStore::open(dir, durability, SledSync::FlushOnly)?)
        }
    })
}
