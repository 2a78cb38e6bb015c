//! A storage that implements only `Storage`'s nine required methods: its
//! reads come from the defaults, through `open_read`, and a log runs on it
//! as on the storages that override them.

use std::io;
use std::sync::Arc;

use payonce_log::{MemStorage, Storage, StorageFile, StorageLock, StorageRead};

use crate::support::{append_payloads, expected, open_collect, payloads, small_config};

/// `MemStorage` behind the required methods alone.
#[derive(Debug)]
struct CoreOnly(MemStorage);

impl Storage for CoreOnly {
    fn describe(&self, name: &str) -> String {
        self.0.describe(name)
    }
    fn list(&self) -> io::Result<Vec<String>> {
        self.0.list()
    }
    fn open_read(&self, name: &str) -> io::Result<Box<dyn StorageRead>> {
        self.0.open_read(name)
    }
    fn create_new(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        self.0.create_new(name)
    }
    fn open_append(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        self.0.open_append(name)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.0.rename(from, to)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.0.remove(name)
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.0.sync_dir()
    }
    fn try_lock(&self) -> io::Result<Option<Box<dyn StorageLock>>> {
        self.0.try_lock()
    }
}

#[test]
fn the_default_reads_answer_as_a_storage_that_overrides_them() {
    // Guards against a default read that ignores its limit, reads past the end, or loses bytes.
    let mem = MemStorage::new();
    let mut file = mem.create_new("f").unwrap();
    let bytes: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    file.append(&bytes).unwrap();
    drop(file);
    let core = CoreOnly(mem.clone());
    assert_eq!(core.len("f").unwrap(), 10_000);
    for len_max in [0, 1, 4096, 10_000, 10_001, u64::MAX] {
        assert_eq!(
            core.read("f", len_max).unwrap(),
            mem.read("f", len_max).unwrap()
        );
        let mut into = vec![9; 3];
        core.read_into("f", len_max, &mut into).unwrap();
        assert_eq!(into, mem.read("f", len_max).unwrap(), "{len_max}");
    }
    for (offset, len) in [
        (0, 0),
        (0, 10),
        (9_990, 100),
        (10_000, 5),
        (20_000, 5),
        (17, usize::MAX),
    ] {
        assert_eq!(
            core.read_range("f", offset, len).unwrap(),
            mem.read_range("f", offset, len).unwrap(),
            "{offset} {len}"
        );
        let mut into = vec![7];
        core.read_range_into("f", offset, len, &mut into).unwrap();
        assert_eq!(into[1..], mem.read_range("f", offset, len).unwrap()[..]);
    }
    for missing in [core.len("g").map(drop), core.read("g", 1).map(drop)] {
        assert_eq!(missing.unwrap_err().kind(), io::ErrorKind::NotFound);
    }
}

#[test]
fn a_log_runs_on_a_storage_of_the_required_methods_alone() {
    // Guards against a log that reaches for a read only a storage's override gives.
    let storage: Arc<dyn Storage> = Arc::new(CoreOnly(MemStorage::new()));
    let config = small_config();
    let mut count = 0;
    for round in 0..3 {
        let (log, recovery, seen) = open_collect(&storage, &config).unwrap();
        assert_eq!(payloads(&seen), expected(count), "round {round}");
        assert_eq!(recovery.torn_tail, None);
        append_payloads(&log, 40);
        count += 40;
    }
}
